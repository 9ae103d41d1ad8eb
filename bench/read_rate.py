"""How much of real jobs gpudoc reads before launch: the commands of a collection (each as its framework's
own README, docs or example script gives it, on the verbatim configs of tests/fixtures/real/configs/, a
script it runs replaced by a stand-in of tests/fixtures/real/standins/, with the values the framework
would use as the truth), each run through `gpudoc run --dry-run --json` in a directory of its own, with
the venv's programs first on PATH as in an activated environment. Prints per framework the knob values
read right, missed (not read, or read as unknown) and wrong, and the read rate (right / all).

Two collections: ``seen`` (tests/fixtures/real/commands.jsonl, the commands the readers were written
against) and ``heldout`` (tests/fixtures/real/heldout.jsonl, collected afterwards and measured before
any reader was changed for them); ``all`` measures both, each on its own table.

    .venv/bin/python bench/read_rate.py [--collection seen|heldout|all] [ID ...]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "fixtures" / "real"
COLLECTIONS = {"seen": REAL / "commands.jsonl", "heldout": REAL / "heldout.jsonl"}
CONFIGS = REAL / "configs"
_LIGHTNING_PRECISION = {"16": "fp16", "32": "fp32", "64": "fp64"}  # Lightning's "16-mixed", "32-true", 16


def _same(knob: str, read: object, truth: object) -> bool:
    if knob == "precision" and isinstance(read, (str, int)):  # Lightning's and LitGPT's "bf16-true", "16-mixed"
        head = str(read).split("-")[0]
        return _LIGHTNING_PRECISION.get(head, head) == truth
    return read == truth


def fixture(name: str) -> Path:
    """Where an entry's file comes from: a stand-in script (``standins/...``), a whole tree kept under
    tests/fixtures/real/ (``lightning-hydra-template``), else a verbatim config of configs/."""
    return REAL / name if "/" in name or (REAL / name).is_dir() else CONFIGS / name


def load(collection: str) -> list[dict]:
    return [json.loads(line) for line in COLLECTIONS[collection].read_text().splitlines() if line.strip()]


def read_values(entry: dict, where: Path) -> dict[str, object]:
    """What `gpudoc run --dry-run --json` read of the entry's command: {knob: value}."""
    for name, source in entry["files"].items():
        if fixture(source).is_dir():
            shutil.copytree(fixture(source), where / name, dirs_exist_ok=True)
            continue
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture(source), where / name)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "HOME": str(where), "XDG_CACHE_HOME": str(where / ".cache"), "NO_COLOR": "1",
           **entry.get("env", {})}
    cwd = where / entry.get("cwd", ".")
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "gpudoc", "run", "--dry-run", "--json", "--", *entry["command"]],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        print(f"{entry['id']}: exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")
        return {}
    return {b["knob"]: b["new"] for b in json.loads(done.stdout).get("bindings", []) if b.get("knob")}


def main(argv: list[str]) -> int:
    collection = "seen"
    if argv[:1] == ["--collection"] and len(argv) > 1:
        collection, argv = argv[1], argv[2:]
    for name in (COLLECTIONS if collection == "all" else [collection]):
        entries = [e for e in load(name) if not argv or e["id"] in argv]
        if entries:
            print(f"== {name}: {COLLECTIONS[name].relative_to(REPO)}")
            measure(entries)
    return 0


def measure(entries: list[dict]) -> None:
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # right, missed, wrong
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            where = Path(tmp) / entry["id"]
            where.mkdir()
            read = read_values(entry, where)
            marks = []
            for knob, truth in entry["truth"].items():
                got = read.get(knob)
                column = 0 if got is not None and _same(knob, got, truth) else 1 if got is None else 2
                tally[entry["framework"]][column] += 1
                marks.append(f"{knob}={got!r}" + ("" if column == 0 else f" (truth {truth!r})"))
            print(f"{entry['id']:<32} " + ", ".join(marks))
    print(f"\n{'framework':<16} {'right':>6} {'missed':>7} {'wrong':>6} {'rate':>6}")
    total = [0, 0, 0]
    for framework, (right, missed, wrong) in sorted(tally.items()):
        total = [total[0] + right, total[1] + missed, total[2] + wrong]
        print(f"{framework:<16} {right:>6} {missed:>7} {wrong:>6} {right / (right + missed + wrong):>6.0%}")
    print(f"{'all':<16} {total[0]:>6} {total[1]:>7} {total[2]:>6} {total[0] / max(sum(total), 1):>6.0%}\n")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
