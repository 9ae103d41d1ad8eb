"""No signature matched is not success: a log that shows a failure in any of the usual ways is
at least `error`, with that line as the evidence."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.diagnose.text import diagnose_text
from tests.diagnose.test_property import NOISE_LINE

MARKED = [
    "ERROR:root:training crashed at step 10",
    "2024-01-01 10:00:00,123 ERROR something went wrong in the data pipeline",
    "[ERROR] worker 3 died",
    "FATAL: cannot continue",
    "CRITICAL:trainer:giving up",
    "E1125 12:00:00.123456  1234 foo.cc:12] Check failed: x > 0",  # glog, by its words
    "F0301 08:15:02.000001  9 bar.cc:7] Check failed: ptr != nullptr",
    "python: /src/foo.cpp:12: int main(): Assertion `n > 0' failed.",
    "train.py FAILED",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "srun: error: node1: task 0: Exited with exit code 1",
    "Process finished with exit code 2",
    "=========== FAILED ===========",
]


@pytest.mark.parametrize("line", MARKED)
def test_a_failure_marker_alone_is_an_error_with_its_line_as_evidence(line):
    d = diagnose_text(f"step 1 loss 2.0\n{line}\nstep 2 loss 1.9\n")
    assert d.cause == "error", d.summary
    assert d.evidence is not None and d.evidence.strip() in line
    assert d.line_number == 2
    assert d.summary.startswith("The job failed; no known failure message, but this line says so: ")


def test_a_traceback_ending_in_any_exception_is_an_error():
    log = ("step 1\nTraceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n"
           "  File \"train.py\", line 5, in main\n    raise Boom('no')\nmypkg.errors.Boom: no\n")
    d = diagnose_text(log)
    assert d.cause == "error" and d.evidence == "mypkg.errors.Boom: no"


@pytest.mark.parametrize("log, exit_code", [
    ("step 1\nstep 2\ndone\n", None),
    ("WARNING: ERROR budget below 10%\nstep 2\n", None),
    ("ERROR:root:transient, retrying\nstep 2\n", 0),  # the job said it exited 0: it did not fail
])
def test_no_marker_or_a_clean_exit_is_no_failure(log, exit_code):
    assert diagnose_text(log, exit_code=exit_code).cause == "ok"


def test_an_exit_status_keeps_the_marker_as_evidence():
    d = diagnose_text("step 1\n[ERROR] dataset shard 7 unreadable\n", exit_code=1)
    assert d.cause == "error" and d.exit_code == 1 and "shard 7" in (d.evidence or "")
    assert "(exit status 1)" in d.summary


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(NOISE_LINE, max_size=20), after=st.lists(NOISE_LINE, max_size=20),
       marker=st.sampled_from(MARKED))
def test_any_noise_around_a_marker_is_an_error_with_the_marker_as_evidence(before, after, marker):
    log = "\n".join([*before, marker, *after]) + "\n"
    d = diagnose_text(log)
    assert d.cause == "error"
    assert d.evidence is not None and d.evidence.strip() in marker
