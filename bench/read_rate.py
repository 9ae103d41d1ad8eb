"""How much of real jobs gpudoc reads before launch: the commands of a collection (each as its framework's
own README, docs or example script gives it, on the verbatim configs of tests/fixtures/real/configs/, a
script it runs replaced by a stand-in of tests/fixtures/real/standins/, with the values the framework
would use as the truth), each run through `gpudoc run --dry-run --json` in a directory of its own, as on
a machine with the framework installed: the venv's programs first on PATH as in an activated
environment, and for a front-end installed beside the venv (LitGPT, LLaMA-Factory, axolotl: ``bin/test``)
its programs run by an interpreter that has it on its path, with the switches its docs give for running
against other releases. Prints per framework the knob values read right, missed (not read, or read as
unknown) and wrong, the read rate (right / all), and how many commands were read by the framework's own
parser (asked) and how many by gpudoc's own reader because it could not be asked (fallback), as the
dry-run's notes and the reader helper's answers say. A truth of null is a knob the job does not have (a full fine-tune's LoRA rank):
reading a value for it is wrong.

Two collections: ``seen`` (tests/fixtures/real/commands.jsonl, the commands the readers were written
against) and ``heldout`` (tests/fixtures/real/heldout.jsonl, collected afterwards and measured before
any reader was changed for them); ``all`` measures both, each on its own table. ``--fallback`` refuses
gpudoc's reader helper in every job's interpreter, so the hand-written readers read alone, for comparison.

    .venv/bin/python bench/read_rate.py [--collection seen|heldout|all] [--fallback] [ID ...]
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from gpudoc.helpercache import cache_dir

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "fixtures" / "real"
COLLECTIONS = {"seen": REAL / "commands.jsonl", "heldout": REAL / "heldout.jsonl"}
CONFIGS = REAL / "configs"
VENV_BIN = Path(sys.executable).parent
# The front-ends bin/test installs beside the venv, each in a directory of its own because its pins
# contradict the venv's frameworks, and the switches each one's docs give for running so: LLaMA-Factory
# checks its pins at import unless DISABLE_VERSION_CHECK, and refuses a key its release no longer
# parses unless ALLOW_EXTRA_ARGS.
BESIDE = {"litgpt": ("litgpt", {}),
          "llama-factory": ("llamafactory", {"DISABLE_VERSION_CHECK": "1", "ALLOW_EXTRA_ARGS": "1"}),
          "axolotl": ("axolotl", {})}
REFUSED = "gpudoc's reader helper is refused here: the bench measures gpudoc's own readers alone"
# What the dry-run's notes say of who read the command: the framework's own parser, or gpudoc's own
# reader because the framework could not be asked (checked first: its note names the parser too).
_FALLBACK = re.compile(r"read by gpudoc's own reader|could not be asked|could not compose")
_ASKED = re.compile(r"read by .+ itself: |read by .+'s own parser|read through its config loader")
_LIGHTNING_PRECISION = {"16": "fp16", "32": "fp32", "64": "fp64"}  # Lightning's "16-mixed", "32-true", 16


@dataclass
class Read:
    """What one dry-run read: {knob: value}, who read it ("asked", "fallback", or "" where no note
    says), and the error line where the dry-run failed."""
    values: dict[str, object] = field(default_factory=dict)
    reader: str = ""
    error: str = ""


def _same(knob: str, read: object, truth: object) -> bool:
    if knob == "precision" and isinstance(read, (str, int)):  # Lightning's and LitGPT's "bf16-true", "16-mixed"
        head = str(read).split("-")[0]
        return _LIGHTNING_PRECISION.get(head, head) == truth
    return read == truth


def score(knob: str, read: object, truth: object) -> int:
    """0 right, 1 missed, 2 wrong. A truth of None is a knob the job does not have: right unread, wrong read."""
    if truth is None:
        return 0 if read is None else 2
    return 1 if read is None else 0 if _same(knob, read, truth) else 2


def who_read(notes: list[str], answered: bool = False) -> str:
    """"fallback" where a note says gpudoc's own reader read the command (or a part of it) because its
    framework could not be asked; "asked" where one says the framework's own parser read it, or
    ``answered``, the reader helper answered (HF's, TRL's, Hydra's and Lightning's readers ask without
    a note); else "" (nothing to ask: a DeepSpeed JSON, nanoGPT's config, a torchtune file of plain values)."""
    if any(_FALLBACK.search(n) for n in notes):
        return "fallback"
    return "asked" if answered or any(_ASKED.search(n) for n in notes) else ""


def fixture(name: str) -> Path:
    """Where an entry's file comes from: a stand-in script (``standins/...``), a whole tree kept under
    tests/fixtures/real/ (``lightning-hydra-template``), else a verbatim config of configs/."""
    return REAL / name if "/" in name or (REAL / name).is_dir() else CONFIGS / name


def load(collection: str) -> list[dict]:
    return [json.loads(line) for line in COLLECTIONS[collection].read_text().splitlines() if line.strip()]


def programs(root: Path, framework: str, *, fallback: bool = False) -> Path | None:
    """The directory of programs first on an entry's PATH, made once under ``root``: ``python``, a
    shell line that runs the venv's interpreter with a front-end installed beside the venv on its path
    (and its switches) and, with ``fallback``, refuses gpudoc's reader helper; the venv's console
    scripts and the front-end's own, each run by that ``python`` through its ``#!`` line, which is how
    gpudoc finds the job's interpreter. None where the venv's programs serve as they are (or the
    front-end is not installed beside the venv: gpudoc's own reader then says so)."""
    install = VENV_BIN.parent / BESIDE[framework][0] if framework in BESIDE else None
    install = install if install is not None and install.is_dir() else None
    if install is None and not fallback:
        return None
    bin_dir = root / "programs" / (framework + ("-fallback" if fallback else "")) / "bin"
    if bin_dir.is_dir():
        return bin_dir
    bin_dir.mkdir(parents=True)
    env = {"PYTHONPATH": str(install), **BESIDE[framework][1]} if install is not None else {}
    refuse = f'case "$1" in */gpudoc/readhelper/run.py) echo {shlex.quote(REFUSED)} >&2; exit 3;; esac\n'
    shim = bin_dir / "python"
    shim.write_text("#!/bin/sh\n" + (refuse if fallback else "")
                    + "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
                    + f'exec {shlex.quote(sys.executable)} "$@"\n')
    shim.chmod(0o755)
    for directory in [VENV_BIN] + ([install / "bin"] if install is not None else []):
        for script in sorted(directory.iterdir()):
            if script.name.startswith("python") or not script.is_file():
                continue
            try:
                head, _, body = script.read_text().partition("\n")
            except (OSError, UnicodeDecodeError):
                continue  # a compiled program: not a console script
            if head.startswith("#!") and Path(head[2:].strip()).parent == VENV_BIN:
                (bin_dir / script.name).write_text(f"#!{shim}\n{body}")
                (bin_dir / script.name).chmod(0o755)
    (bin_dir / "python3").symlink_to("python")
    return bin_dir


def read_values(entry: dict, where: Path, root: Path, *, fallback: bool = False) -> Read:
    """What `gpudoc run --dry-run --json` read of the entry's command, in ``where``; ``root``: the
    bench's own directory (its programs, and the one helper-answer cache every entry shares)."""
    for name, source in entry["files"].items():
        if fixture(source).is_dir():
            shutil.copytree(fixture(source), where / name, dirs_exist_ok=True)
            continue
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture(source), where / name)
    first = programs(root, entry["framework"], fallback=fallback)
    path = os.pathsep.join([*([str(first)] if first else []), str(VENV_BIN), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "HOME": str(where), "XDG_CACHE_HOME": str(root / "cache"), "NO_COLOR": "1",
           **entry.get("env", {})}
    cwd = where / entry.get("cwd", ".")
    cwd.mkdir(parents=True, exist_ok=True)
    answers = cache_dir(env, "read")  # each answer the reader helper gives is kept there, one file
    before = set(answers.glob("*.json"))
    # A helper that imports torch, transformers and peft on a busy machine takes its own limit (120 s).
    done = subprocess.run([sys.executable, "-m", "gpudoc", "run", "--dry-run", "--json", "--", *entry["command"]],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    notes = [line.removeprefix("gpudoc: note: ") for line in done.stderr.splitlines()
             if line.startswith("gpudoc: note: ")]
    answered = bool(set(answers.glob("*.json")) - before)
    if done.returncode != 0:
        return Read(reader=who_read(notes, answered),
                    error=f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")
    said = json.loads(done.stdout)
    return Read({b["knob"]: b["new"] for b in said.get("bindings", []) if b.get("knob")},
                who_read(notes + [str(n) for n in said.get("notes") or ()], answered))


def main(argv: list[str]) -> int:
    collection = "seen"
    if argv[:1] == ["--collection"] and len(argv) > 1:
        collection, argv = argv[1], argv[2:]
    fallback = "--fallback" in argv
    argv = [a for a in argv if a != "--fallback"]
    with tempfile.TemporaryDirectory(prefix="read-rate-") as tmp:
        for name in (COLLECTIONS if collection == "all" else [collection]):
            entries = [e for e in load(name) if not argv or e["id"] in argv]
            if entries:
                print(f"== {name}: {COLLECTIONS[name].relative_to(REPO)}"
                      + (" (gpudoc's own readers alone: --fallback)" if fallback else ""))
                measure(entries, Path(tmp), fallback=fallback)
    return 0


def measure(entries: list[dict], root: Path, *, fallback: bool = False) -> None:
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])  # right, missed, wrong, asked, fallback
    for entry in entries:
        where = root / entry["id"]
        where.mkdir()
        read = read_values(entry, where, root, fallback=fallback)
        row = tally[entry["framework"]]
        row[3] += read.reader == "asked"
        row[4] += read.reader == "fallback"
        marks = []
        for knob, truth in entry["truth"].items():
            got = read.values.get(knob)
            column = score(knob, got, truth)
            row[column] += 1
            marks.append(f"{knob}={got!r}" + ("" if column == 0 else f" (truth {truth!r})"))
        extra = [f"{k}={v!r}" for k, v in read.values.items() if k not in entry["truth"]]
        print(f"{entry['id']:<40} {read.reader or '-':<8} " + ", ".join(marks)
              + (f"; not scored: {', '.join(extra)}" if extra else "") + (f"; {read.error}" if read.error else ""))
    print(f"\n{'framework':<16} {'right':>6} {'missed':>7} {'wrong':>6} {'rate':>6} {'asked':>6} {'fallback':>9}")
    total = [0] * 5
    for framework, row in sorted(tally.items()):
        total = [t + n for t, n in zip(total, row)]
        print(_row(framework, row))
    print(_row("all", total) + "\n")


def _row(name: str, row: list[int]) -> str:
    right, missed, wrong, by_framework, by_gpudoc = row
    return (f"{name:<16} {right:>6} {missed:>7} {wrong:>6} {right / max(right + missed + wrong, 1):>6.0%} "
            f"{by_framework:>6} {by_gpudoc:>9}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
