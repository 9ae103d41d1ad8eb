"""What gpudoc costs a real training loop on the GPU (``jobs/loop.py``): its median step time and the
allocator's peaks bare, under ``gpudoc run`` with its output a pipe and a pty, and — where this gpudoc
has them — with the probe switched off (``--no-probe``) and with the memory-history snapshot armed.
The bare loop runs first and last; its mean is the baseline every ratio is taken against.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

from runner import JOBS, Completed, Kit, Result, SectionSkipped

STEPS_GPU, STEPS_CPU = 100, 20
ROUNDS_GPU = 2
TARGET = 0.01  # at most 1% of step time (the probe issue's target, held to the launcher too)
_MIN_LEFT_S = 20  # a variant needs about this long on an H100: imports, CUDA, the model, the steps
SNAPSHOT = "pipe, snapshot armed"


def _on_pty(kit: Kit, argv: list[str], cwd: Path) -> Completed:
    """Run with stdin, stdout and stderr a terminal, as in tmux: gpudoc then relays through a pty."""
    master, slave = os.openpty()
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=kit.env(), stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=kit.remaining())
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        timed_out = True
    reader.join(timeout=5)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    return Completed(argv, proc.returncode, text, text, time.monotonic() - start, timed_out)


def _supports(kit: Kit, cwd: Path, switch: str | None = None, profile: str | None = None) -> bool:
    """Whether this gpudoc takes a run switch or a ``[run]`` key (a dry run that refuses it: not)."""
    probe = cwd / "supports"
    probe.mkdir(exist_ok=True)
    if profile is not None:
        (probe / "gpudoc.toml").write_text(profile)
    done = kit.gpudoc("run", "--dry-run", "--json", *([switch] if switch else []), "--", "true", cwd=probe, timeout=15)
    return done.returncode == 0


def run(kit: Kit, result: Result) -> None:
    work = kit.work / "overhead"
    work.mkdir(parents=True, exist_ok=True)
    steps = STEPS_CPU if kit.cpu else STEPS_GPU
    loop = [kit.python, str(JOBS / "loop.py"), "--steps", str(steps)]
    if kit.cpu:
        loop += ["--device", "cpu", "--tiny", "--warmup", "5", "--micro-batch-size", "2", "--seq", "64"]
    wrapped = [kit.python, "-m", "gpudoc", "run", "--no-check"]
    variants: list[tuple[str, list[str], bool]] = [("bare", [], False), ("pipe", wrapped, False)]
    once: list[tuple[str, list[str], bool]] = []  # a cost far above the noise: one run says it
    if not kit.cpu:
        if _supports(kit, work, "--no-probe"):
            variants.append(("pipe, probe off", [*wrapped, "--no-probe"], False))
        else:
            result["probe"] = "not measured: this gpudoc has no probe (run --no-probe is refused)"
        if _supports(kit, work, profile='[run]\nsnapshot = "on-oom"\n'):
            # Recording the memory history the whole run (a first launch has no failed step to stop
            # after): the H100 run of 2026-11-28 measured its median step 30% over bare.
            once.append((SNAPSHOT, wrapped, False))
        else:
            result["snapshot"] = "not measured: this gpudoc has no [run] snapshot"
        variants.append(("pty", wrapped, True))
        # Rounds of every variant in turn: on the first H100 run two bare runs, first and last, differed
        # by 6.5%, as much as the effect measured; alternating spreads the drift over every variant.
        variants = [*variants, *once, *variants * (ROUNDS_GPU - 1)]
    figures: dict[str, list[dict]] = {}
    order: list[tuple[str, dict]] = []
    for name, prefix, pty in variants:
        if kit.remaining() < _MIN_LEFT_S:
            result.setdefault("not_run", []).append(name)
            continue
        cwd = work / name.replace(", ", "-").replace(" ", "-")
        cwd.mkdir(exist_ok=True)
        if name == SNAPSHOT:
            (cwd / "gpudoc.toml").write_text('[run]\nsnapshot = "on-oom"\n')
        out = cwd / f"loop-{len(figures.get(name, []))}.json"
        argv = [*prefix, *(["--"] if prefix else []), *loop, "--out", str(out)]
        done = _on_pty(kit, argv, cwd) if pty else kit.run(argv, cwd=cwd)
        if done.returncode != 0 or not out.exists():
            result.setdefault("errors", {})[name] = f"exit {done.returncode}: {done.tail()}"
            continue
        figures.setdefault(name, []).append(json.loads(out.read_text()))
        order.append((name, figures[name][-1]))
    bare = [f["seconds_per_step"] for f in figures.get("bare", [])]
    if not bare:
        why = f"no time left for {', '.join(result['not_run'])}" if result.get("not_run") else "it failed"
        result["status"], result["reason"] = "fail", f"the bare loop did not run: {why}"
        return
    base = sum(bare) / len(bare)
    table = {}
    for name, runs in figures.items():
        step = sum(f["seconds_per_step"] for f in runs) / len(runs)  # the mean of its rounds
        table[name] = {"seconds_per_step": step, "ratio": step / base, "runs": len(runs),
                       "peak_allocated_bytes": runs[-1]["peak_allocated_bytes"],
                       "peak_reserved_bytes": runs[-1]["peak_reserved_bytes"]}
    result["variants"] = table
    result["bare_spread"] = (max(bare) - min(bare)) / base if len(bare) > 1 else None
    result["runs_in_order"] = [(name, f["seconds_per_step"]) for name, f in order]
    if kit.cpu:
        raise SectionSkipped("no CUDA: a two-layer loop on the CPU rehearsed bare and under gpudoc run (pipe)")
    peak = table["bare"]["peak_allocated_bytes"]
    verdicts = {f"{name}: within {TARGET:.0%} of bare": entry["ratio"] <= 1 + TARGET
                for name, entry in table.items() if name not in ("bare", SNAPSHOT)}
    if SNAPSHOT in table:  # a measured cost, not a target: the probe stops recording after the failed step
        result["snapshot_cost"] = f"memory history recorded: step time x{table[SNAPSHOT]['ratio']:.2f} of bare"
    # A ratio means nothing finer than the baseline's own spread.
    verdicts[f"the baseline is steady (bare runs within {TARGET:.0%} of each other)"] = (result["bare_spread"] or 0) <= TARGET
    verdicts["peak memory the same"] = all(entry["peak_allocated_bytes"] == peak for entry in table.values())
    planned = {name for name, _, _ in variants}
    verdicts["every variant ran"] = not result.get("errors") and planned <= set(table)
    result["checks"] = verdicts
    failed = [name for name, ok in verdicts.items() if not ok]
    result["status"] = "fail" if failed else "pass"
    result["reason"] = ("not: " + "; ".join(failed)) if failed else f"every variant within {TARGET:.0%} of bare"
