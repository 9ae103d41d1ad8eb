"""The typed diagnosis: the SPEC's keys once, a tolerant reader for old or damaged records, the
constructors for the cases that need no log, and the one sentence travelling with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpudoc.diagnose.diagnosis import CAUSES, SPEC_KEYS, Diagnosis
from gpudoc.diagnose.text import diagnose_text
from gpudoc.runs.record import RunRecord
from tests.conftest import REPO

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.68 GiB of which 1.50 GiB is free. Process 999 has 4.00 GiB memory in use. Including non-PyTorch memory, "
       "this process has 18.10 GiB memory in use. Of the allocated memory 17.20 GiB is allocated by PyTorch, and "
       "300.00 MiB is reserved by PyTorch but unallocated.\n")


def test_the_spec_keys_in_the_specs_order():
    # SPEC "gpudoc fix --json": the diagnosis object's keys, in order.
    assert SPEC_KEYS == ("cause", "backend", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
                         "reserved_unallocated_bytes", "other_processes", "gpu_index", "rank", "exit_code", "summary")
    doc = diagnose_text(OOM).to_dict()
    assert tuple(doc)[:len(SPEC_KEYS)] == SPEC_KEYS
    assert doc["other_processes"] == [{"pid": 999, "bytes": 4 * 1024**3}]


def test_a_round_trip_through_a_run_record_keeps_the_type_and_every_field():
    diag = diagnose_text(OOM, exit_code=1)
    record = RunRecord(id="r", command=["x"], cwd="/", diagnosis=diag)
    back = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert isinstance(back.diagnosis, Diagnosis) and back.diagnosis == diag
    assert back.failed_oom and back.diagnosis.other_processes_bytes == 4 * 1024**3


@pytest.mark.parametrize("damaged", [
    {"cause": "gpu_oom", "requested_bytes": "2 GiB", "other_processes": [{"pid": "x"}, 7], "rank": True},
    {"cause": "made_up", "summary": None},
    {"summary": "old gpudoc wrote no cause"},
    {"cause": "gpu_oom", "failed_ranks": "0,1", "fragmentation": "yes", "unknown_key": 1},
])
def test_old_or_damaged_records_read_back_without_a_crash(damaged):
    diag = Diagnosis.from_dict(damaged)
    assert diag is not None and diag.cause in CAUSES
    assert diag.requested_bytes is None and diag.rank is None and diag.other_processes == ()
    assert isinstance(diag.summary, str) and diag.failed_ranks == () and diag.fragmentation is False


def test_nothing_to_read_is_no_diagnosis():
    assert Diagnosis.from_dict(None) is None and Diagnosis.from_dict(["gpu_oom"]) is None
    assert RunRecord.from_dict({"id": "r", "command": [], "cwd": "/", "diagnosis": "gpu_oom"}).diagnosis is None


def test_the_cases_that_need_no_log():
    assert (Diagnosis.ok().cause, Diagnosis.ok().exit_code) == ("ok", 0)
    assert Diagnosis.still_running("r1").cause is None and "r1" in Diagnosis.still_running("r1").summary
    assert Diagnosis.without_log("error", 3).inferred
    stopped = diagnose_text("Traceback (most recent call last):\nKeyboardInterrupt\n", exit_code=1).stopped_by_user(
        "SIGINT")
    assert stopped.cause == "signal" and stopped.summary.startswith("Stopped by the user (SIGINT to gpudoc); ")
    # One sentence: what the job's own diagnosis said goes on in lower case after the semicolon.
    own = diagnose_text("Traceback (most recent call last):\nKeyboardInterrupt\n", exit_code=1).summary
    assert own[:1].isupper() and stopped.summary.endswith("; " + own[0].lower() + own[1:])
    # gpudoc's own SIGKILL (third Ctrl-C, the grace ran out) is not the kernel's OOM killer.
    guessed = diagnose_text("step 1\n", exit_code=-9)
    assert guessed.cause == "host_oom" and guessed.inferred
    escalated = guessed.stopped_by_user("SIGINT")
    assert escalated.cause == "signal" and "OOM" not in escalated.summary
    assert escalated.summary == "Stopped by the user (SIGINT to gpudoc): gpudoc ended the job with SIGKILL."


def test_the_sentence_is_written_once_and_every_renderer_shows_it(tmp_path):
    # What the diagnosis says is what `fix` prints first, in text: no second wording.
    (tmp_path / "oom.log").write_text(OOM)
    done = subprocess.run([sys.executable, "-m", "gpudoc", "fix", "--log", "oom.log"], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "NO_COLOR": "1",
                                                               "HOME": str(tmp_path)}, timeout=60)
    assert done.stdout.splitlines()[0] == diagnose_text(OOM).summary


def test_the_ladder_imports_the_type_but_not_the_parser():
    code = ("import sys, gpudoc.ladder; "
            "print(sorted(m for m in sys.modules if m.startswith('gpudoc.diagnose')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip() == "['gpudoc.diagnose', 'gpudoc.diagnose.diagnosis']", done.stderr
