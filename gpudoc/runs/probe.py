"""What the probe inside the job wrote (``<run>/probe/rank-N.jsonl``, see ``gpudoc/probe/agent.py``),
read as untrusted input and folded into the record's ``observed``, ``steps`` and ``oom``.

The files are the job's to write, so each is read through a bounded window (its first
``READ_CAP_BYTES``, lines up to ``LINE_CAP_BYTES``), a line that is not a JSON object of the
expected shape is skipped and counted, and every value is checked before it is believed. The
directory and each file are held to the trust rule (``gpudoc.trust``, links not followed): one
another user owns or anyone can write, a link planted in their place, or anything but a plain
file, is not read, and ``probe_errors`` says so.
"""

from __future__ import annotations

import json
import os
import re
import stat
import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoc.frameworks.base import Resolved

from gpudoc.reported import count
from gpudoc.runs.reach import unreachable, wrapper_resets
from gpudoc.runs.steps import from_probe

READ_CAP_BYTES = 8 * 2**20
LINE_CAP_BYTES = 64 * 1024
MAX_RANKS = 1024
MAX_PARSERS = 8
MAX_OPTIONS = 2000
PROBE_DIR = "probe"
_RANK_FILE = re.compile(r"rank-(\d{1,4})\.jsonl")
# The profile's spellings of what the probe saw.
_OPTIMIZERS = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd", "Adafactor": "adafactor"}
_PHASES = ("forward", "backward", "optimizer", "data", "eval")
# A value the record must not keep, by the name of its option (`--hub_token`, `--wandb_api_key`).
_SECRET = re.compile(r"token(?!iz|s)|secret|passw|api_?key|credential|auth", re.IGNORECASE)  # not a tokenizer's
REDACTED = "<redacted>"
_BREAKDOWN = ("parameters", "gradients", "optimizer_states", "other", "reserved_unallocated")


def site_dir() -> Path:
    """The directory gpudoc puts first on the job's PYTHONPATH (its ``sitecustomize`` starts the probe)."""
    return Path(__file__).resolve().parent.parent / "probe" / "site"


def launch_environment(env: dict[str, str], run_dir: Path, argv: list[str], say: Callable[[str], None] | None,
                       snapshot: tuple[str, int | None] = ("off", None), cwd: Path | None = None) -> dict[str, str]:
    """The job's environment with the probe in it; ``say`` hears once why a command is, or may be,
    out of reach (``cwd``: where a wrapper script it runs is found);
    ``snapshot``: the memory history's mode and the step after which it may stop (``snapshot_setting``)."""
    why = unreachable(list(argv)) or wrapper_resets(list(argv), cwd)
    if why and say is not None:
        say(why)
    env = child_environment(env, run_dir)
    mode, until = snapshot
    if mode == "on-oom":
        env["GPUDOC_PROBE_SNAPSHOT"] = mode
        if until is not None:
            env["GPUDOC_PROBE_SNAPSHOT_UNTIL"] = str(until)
    return env


def snapshot_setting(run: Mapping[str, Any], store: Any, parent_id: str | None) -> tuple[str, int | None]:
    """``[run] snapshot``: "on-oom" arms PyTorch's memory history and dumps it at an OOM. Unset, it is on
    for a relaunch (a --retry-oom chain, fix --rerun: another OOM is likely, and its snapshot says what
    filled the card) and off for a first launch; recording stops a few steps past the step where the
    attempt it relaunches ran out of memory, when the probe saw that step."""
    parent = store.record_or_none(parent_id) if parent_id else None
    mode = run.get("snapshot") or ("on-oom" if parent_id else "off")
    step = count((parent.oom or {}).get("step")) if parent is not None and isinstance(parent.oom, dict) else None
    return str(mode), step


def child_environment(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """The job's environment with the probe in it: the child's alone, never gpudoc's own."""
    path = env.get("PYTHONPATH")
    return dict(env, GPUDOC_PROBE_DIR=str(run_dir / PROBE_DIR),
                PYTHONPATH=os.pathsep.join([str(site_dir()), *([path] if path else [])]))


def _events(path: Path) -> tuple[list[dict], int]:
    """The file's events, and how many lines were not events (bounded, never following a link)."""
    import stat

    events, bad = [], 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return [], 1
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], 1  # a FIFO, a device: nothing the probe writes
        data = handle.read(READ_CAP_BYTES)
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            doc = json.loads(line[:LINE_CAP_BYTES]) if len(line) <= LINE_CAP_BYTES else None
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("event"), str):
            events.append(doc)
        else:
            bad += 1
    return events, bad



def _rank_view(events: list[dict]) -> dict[str, Any]:
    """One rank's knobs as the probe saw them: {knob: (value, how)}, its steps and its OOM."""
    knobs: dict[str, tuple[Any, str]] = {}
    steps = [e for e in events if e["event"] == "step"]
    # The input the job trained with: the last one it showed (one, unless it went on after an OOM).
    inputs = [(i, e) for i, e in enumerate(events) if e["event"] == "input" and isinstance(e.get("shape"), list)]
    last_input = inputs[-1][1] if inputs else {}
    shape = last_input.get("shape")
    if shape and all(count(n) for n in shape):
        knobs["micro_batch_size"] = (shape[0], "input-shape")
        if len(shape) >= 2 and str(last_input.get("dtype")).startswith("int"):  # token ids: (batch, sequence)
            knobs["max_seq_len"] = (shape[1], "input-shape")
    passes = [p for p in (count(e.get("backward")) for e in steps) if p]
    if passes:
        knobs["gradient_accumulation_steps"] = (int(statistics.median(passes)), "backward-per-step")
    world = next((e for e in steps if count(e.get("world_size"))), None)
    if world is not None:
        knobs["world_size"] = (world["world_size"], "process-group" if world.get("distributed") else "single-process")
    model = next((e for e in events if e["event"] == "model"), {})
    dtypes = model.get("dtypes") if isinstance(model.get("dtypes"), list) else []
    autocast = next((e.get("autocast") for e in steps if isinstance(e.get("autocast"), str)), None)
    if autocast in ("bfloat16", "float16"):
        knobs["precision"] = ("bf16" if autocast == "bfloat16" else "fp16", "autocast")
    elif autocast == "off" and dtypes:
        half = {"bfloat16": "bf16-true", "float16": "fp16-true"}
        trained = [d for d in dtypes if d in half or d == "float32"]
        if len(trained) == 1:
            knobs["precision"] = (half.get(trained[0], "fp32"), "parameter-dtype")
    optimizer = next((e.get("optimizer") for e in steps if isinstance(e.get("optimizer"), str)), None)
    if optimizer:
        knobs["optimizer"] = (_OPTIMIZERS.get(optimizer, optimizer.lower()), "optimizer-step")
    # What the framework resolved answers where the job's own steps have not (an OOM in the first
    # micro batch comes before any optimizer step): the steps, when there are some, win, except fp32
    # guessed from the parameters' dtype where no autocast was seen: a compiled model's wrapper may
    # enter autocast out of the probe's sight, and the framework says what it entered.
    for knob, value in _framework_knobs(events).items():
        if knob == "precision" and knobs.get(knob) == ("fp32", "parameter-dtype"):
            knobs[knob] = value
        knobs.setdefault(knob, value)
    ooms = [(i, e) for i, e in enumerate(events) if e["event"] == "oom"]
    went_on = [(i, e) for i, e in ooms if inputs and inputs[-1][0] > i]  # a forward came after it
    oom = next((e for i, e in ooms if (i, e) not in went_on), None)
    left = next((e for e in events if e["event"] == "interrupted" and e.get("phase") in _PHASES), None)
    return {"knobs": knobs, "steps": steps, "oom": oom, "left": left, "model": model, "parsers": _parsers(events),
            "recovered": _recovered(went_on, inputs),
            "total": total_from_settings(events),
            "state_dtype": next((e.get("state_dtype") for e in steps if isinstance(e.get("state_dtype"), str)), None)}


def _recovered(went_on: list[tuple[int, dict]], inputs: list[tuple[int, dict]]) -> dict[str, Any] | None:
    """The OOMs the job went on from (HF's auto_find_batch_size halves its batch and starts again):
    the first one's step and phase, the micro batch it ran out at, the one it went on with at last."""
    if not went_on:
        return None
    at, first = went_on[0]
    before: dict = next((e for i, e in reversed(inputs) if i < at), {})
    return {"step": count(first.get("step")), "phase": first.get("phase") if first.get("phase") in _PHASES else None,
            "micro_batch_size": _batch(before), "went_on_with": _batch(inputs[-1][1]), "times": len(went_on)}


def _batch(event: dict) -> int | None:
    shape = event.get("shape")
    return count(shape[0]) if isinstance(shape, list) and shape else None


def _framework_knobs(events: list[dict]) -> dict[str, tuple[Any, str]]:
    """The knobs in the settings a framework resolved (the HF Trainer's arguments, the Lightning
    Trainer's, a DeepSpeed engine's), read by that framework's adapter, in the profile's spellings;
    an outer framework's first (a DeepSpeed engine inside an HF Trainer says the same)."""
    knobs: dict[str, tuple[Any, str]] = {}
    for name, settings in resolved_settings(events):
        for knob, (value, _key) in framework_resolved(name, settings).knobs.items():
            knobs.setdefault(knob, (value, f"framework:{name}"))
    return knobs


def resolved_settings(events: Iterable[dict]) -> Iterable[tuple[str, dict]]:
    """(framework, the settings it resolved) for each such event the probe wrote: a framework's own
    (the HF Trainer's arguments, the Lightning Trainer's, a DeepSpeed engine's, a torchtune recipe's
    config), and a nanoGPT-style script's globals after its configurator ran."""
    for event in events:
        if event.get("event") == "framework" and isinstance(event.get("settings"), dict):
            yield str(event.get("name")), event["settings"]
        elif (event.get("event") == "parser" and event.get("type") == "configurator"
              and isinstance(event.get("values"), dict)):
            yield "nanogpt", event["values"]


def framework_resolved(name: str, settings: dict) -> Resolved:
    """The adapter's reading of what framework ``name`` resolved (``gpudoc.frameworks.registry``)."""
    from gpudoc.frameworks import registry  # the adapters, only for a job whose framework said something

    return registry.resolved(name, settings)


def total_from_settings(events: Iterable[dict]) -> int | None:
    """The job's total optimizer steps where its framework resolved them: the HF Trainer's
    ``state.max_steps`` (epochs x steps per epoch already multiplied out, or ``--max_steps``),
    Lightning's ``estimated_stepping_batches`` or ``max_steps``, a nanoGPT-style ``max_iters``."""
    return next((total for name, settings in resolved_settings(events)
                 if (total := framework_resolved(name, settings).total_steps)), None)


def _parsers(events: list[dict]) -> list[dict]:
    """The argument parsers the job used: the flags each declares (exactly what it accepts) and the
    values it parsed (scalars only). Hydra's, or torchtune's, when the job composed its config with
    one: the keys of the config (what a ``key=value`` override names) and their values."""
    out = []
    for event in events:
        options = event.get("options")
        if event["event"] == "parser" and isinstance(options, list):
            out.append(_parser(event.get("prog"), event.get("type"), [o for o in options if str(o).startswith("-")],
                               event.get("values")))
    settings = {str(e.get("name")): e["settings"] for e in events
                if e["event"] == "framework" and isinstance(e.get("settings"), dict)}
    if "hydra" in settings and "omegaconf" in settings:
        out.append(_parser("hydra", "hydra", list(settings["omegaconf"]), settings["omegaconf"]))
    if "torchtune" in settings:  # its overrides name the keys of the config it parsed
        out.append(_parser("torchtune", "torchtune", list(settings["torchtune"]), settings["torchtune"]))
    return out[:MAX_PARSERS]


def _parser(prog: Any, kind: Any, options: list, raw: Any) -> dict:
    values: dict = raw if isinstance(raw, dict) else {}
    return {"prog": str(prog)[:200], "type": str(kind)[:100],
            "options": [o for o in options[:MAX_OPTIONS] if isinstance(o, str)],
            "values": {str(k)[:100]: REDACTED if _SECRET.search(str(k)) else v
                       for k, v in list(values.items())[:MAX_OPTIONS]
                       if v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 500)}}


def read(run_dir: Path) -> dict[str, Any]:
    """``{"observed", "steps", "oom", "oom_recovered", "parsers", "probe_errors"}`` for the record (each
    None when not seen), and ``left``: a backward or optimizer step an error left unfinished (``observations``)."""
    from gpudoc.trust import untrusted

    directory = run_dir / PROBE_DIR
    ranks: dict[int, dict[str, Any]] = {}
    bad = 0
    errors: list[str] = []
    problem = untrusted(directory, follow_links=False)
    try:
        names: Iterable[str] = sorted(os.listdir(directory))[:MAX_RANKS] if problem is None else ()
    except OSError:
        names = ()
    if problem is not None:
        errors.append(f"{problem}: not read")
    for name in names:
        match = _RANK_FILE.fullmatch(name)
        if not match:
            continue
        problem = untrusted(directory / name, follow_links=False)
        if problem is not None:
            errors.append(f"{problem}: not read")
            continue
        events, skipped = _events(directory / name)
        bad += skipped
        errors += [str(e.get("hook")) + ": " + str(e.get("error"))[:200] for e in events if e["event"] == "error"][:5]
        if events:
            ranks[int(match.group(1))] = _rank_view(events)
    if not ranks:
        return {"observed": None, "steps": None, "oom": None, "oom_recovered": None, "left": None, "parsers": None,
                "probe_errors": errors[:10] or None}
    first = min(ranks)
    observed: dict[str, Any] = {}
    for knob, (value, how) in ranks[first]["knobs"].items():
        agree = [r for r, view in sorted(ranks.items()) if view["knobs"].get(knob, (None,))[0] == value]
        others = {str(r): view["knobs"][knob][0] for r, view in sorted(ranks.items())
                  if knob in view["knobs"] and r not in agree}
        observed[knob] = {"value": value, "how": how, "ranks": agree, "others": others}
    model = ranks[first]["model"]
    if model:
        observed["model"] = {"parameters": count(model.get("parameters")), "trainable": count(model.get("trainable")),
                             "optimizer_state_dtype": ranks[first]["state_dtype"]}
    if bad:
        errors.append(f"{bad} line(s) of the probe's files were not events and were skipped")
    view = ranks[first]
    other_ranks = [ranks[r]["steps"] for r in sorted(ranks) if r != first]
    return {"observed": observed or None, "steps": from_probe(view["steps"], observed, view["total"], other_ranks),
            "oom": _oom(ranks, directory), "left": _left(ranks),
            "oom_recovered": next(({"rank": r, **v["recovered"]} for r, v in sorted(ranks.items()) if v["recovered"]),
                                  None),
            "parsers": ranks[first]["parsers"] or None, "probe_errors": errors[:10] or None}


def observations(run_dir: Path, record: Any, say: Callable[[str], None]) -> dict[str, Any]:
    """``read`` for ``record``'s run, which has ended. A backward or optimizer step an error left
    unfinished (a framework caught it: no ``oom`` event) is its OOM's phase when the job's log says
    it ran out of memory. When no rank wrote although the job ran behind a wrapper script that may
    reset PYTHONPATH (said before the launch), ``say`` hears that the probe saw nothing."""
    seen = read(run_dir)
    left = seen.pop("left", None)
    if seen["oom"] is None and left is not None and record.cause == "gpu_oom":  # when it was, nothing was held
        seen["oom"] = {**left, "breakdown": {}, "snapshot": None, "top": []}
    why = wrapper_resets(list(record.argv), Path(record.cwd))
    if why and not any(seen[key] for key in ("observed", "steps", "oom", "parsers")):
        say(f"the probe saw nothing: no rank of the job wrote ({why.split(': the probe')[0]})")
    return seen


def _oom(ranks: dict[int, dict[str, Any]], directory: Path) -> dict[str, Any] | None:
    for rank, view in sorted(ranks.items()):
        event = view["oom"]
        if event is None:
            continue
        raw = event.get("breakdown") if isinstance(event.get("breakdown"), dict) else {}
        breakdown = {key: count(raw.get(key)) for key in _BREAKDOWN if count(raw.get(key)) is not None}
        return {"rank": rank, "step": count(event.get("step")),
                "phase": event.get("phase") if event.get("phase") in _PHASES else None,
                "breakdown": breakdown, "snapshot": _snapshot(event.get("snapshot"), directory, rank),
                "top": _top(event.get("top"))}
    return None


def _left(ranks: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The first rank's backward or optimizer step that an error left unfinished: {rank, step, phase}."""
    return next(({"rank": rank, "step": count(view["left"].get("step")), "phase": view["left"]["phase"]}
                 for rank, view in sorted(ranks.items()) if view["left"] is not None), None)


def _snapshot(said: Any, directory: Path, rank: int) -> str | None:
    """The memory snapshot the rank dumped: only its own file, in the probe's directory, a plain file."""
    expected = directory / f"snapshot-rank-{rank}.pickle.gz"
    if said != str(expected):
        return None
    try:
        return str(expected) if stat.S_ISREG(os.lstat(expected).st_mode) else None
    except OSError:
        return None


def _top(said: Any) -> list[dict[str, Any]]:
    """The largest live allocations at the OOM, as the probe computed them: each checked."""
    out = []
    for entry in said[:10] if isinstance(said, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("where"), str) and count(entry.get("bytes")) is not None:
            module = entry.get("module")
            out.append({"where": entry["where"][:300], "module": module[:100] if isinstance(module, str) else None,
                        "bytes": entry["bytes"]})
    return out
