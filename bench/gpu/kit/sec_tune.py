"""``gpudoc tune`` on the OOM chain's job, once gpudoc has the command: the micro batch it finds, its
trials and the time they took. Until then the section says so and is skipped."""

from __future__ import annotations

import re

from runner import JOBS, Kit, Result, SectionSkipped
from sec_oom_chain import SEQ


def run(kit: Kit, result: Result) -> None:
    help_text = kit.gpudoc("--help", timeout=15).stdout
    if not re.search(r"^    tune\s", help_text, re.MULTILINE):
        raise SectionSkipped("this gpudoc has no tune command (not in gpudoc --help)")
    if kit.cpu:
        raise SectionSkipped("no CUDA: tune runs trials of the real job")
    work = kit.work / "tune"
    work.mkdir(parents=True, exist_ok=True)
    # The divisors 2 to 16 of the job's 32 per process, from gpudoc's own first guess: on the H100 of
    # 2026-11-28 micro batch 8 ran out of memory at sequence 2048 (the chain's relaunch fits 8 only
    # with expandable segments), so a range from 8 had no answer; this one lands in two or three launches.
    done = kit.gpudoc("tune", "--json", "--min", "2", "--max", "16", "--", kit.python, str(JOBS / "hf_train.py"), "--output_dir",
                      str(work / "out"), "--per_device_train_batch_size", "8", "--gradient_accumulation_steps",
                      "4", "--max_steps", "3", "--bf16", "--report_to", "none", "--save_strategy", "no",
                      "--max_seq_length", str(SEQ), cwd=work)
    doc = done.json()
    result["exit_code"] = done.returncode
    result["seconds"] = round(done.seconds, 1)
    result["best"] = doc.get("best")
    result["trials"] = doc.get("trials")
    result["status"] = "pass" if done.returncode == 0 and doc.get("best") else "fail"
    result["reason"] = f"tune exited {done.returncode}"
