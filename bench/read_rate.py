"""How much of real jobs gpudoc reads before launch: the commands of tests/fixtures/real/commands.jsonl
(each as its framework's own README or config header gives it, on the verbatim configs of
tests/fixtures/real/configs/, with the values a person reads in them as the truth), each run through
`gpudoc run --dry-run --json` in a directory of its own. Prints per framework the knob values read
right, missed (not read, or read as unknown) and wrong, and the read rate (right / all).

    .venv/bin/python bench/read_rate.py [ID ...]
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
COLLECTION = REPO / "tests" / "fixtures" / "real" / "commands.jsonl"
CONFIGS = REPO / "tests" / "fixtures" / "real" / "configs"


def _same(knob: str, read: object, truth: object) -> bool:
    if knob == "precision" and isinstance(read, str):  # Lightning's and LitGPT's "bf16-true", "bf16-mixed"
        return read.split("-")[0] == truth
    return read == truth


def read_values(entry: dict, where: Path) -> dict[str, object]:
    """What `gpudoc run --dry-run --json` read of the entry's command: {knob: value}."""
    for name, fixture in entry["files"].items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CONFIGS / fixture, where / name)
    env = {**os.environ, "HOME": str(where), "XDG_CACHE_HOME": str(where / ".cache"), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "gpudoc", "run", "--dry-run", "--json", "--", *entry["command"]],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {}
    return {b["knob"]: b["new"] for b in json.loads(done.stdout).get("bindings", []) if b.get("knob")}


def main(argv: list[str]) -> int:
    entries = [json.loads(line) for line in COLLECTION.read_text().splitlines() if line.strip()]
    entries = [e for e in entries if not argv or e["id"] in argv]
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
    print(f"{'all':<16} {total[0]:>6} {total[1]:>7} {total[2]:>6} {total[0] / max(sum(total), 1):>6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
