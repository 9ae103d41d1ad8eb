"""`gpudoc runs` as text: what ran, what changed from the run compared with, what pruning leaves."""

from __future__ import annotations

import io

from gpudoc.output import Console
from gpudoc.render.text import text
from gpudoc.results.runs import DryRunResult, PruneResult, RunResult, RunsDiffResult, RunShowResult, RunsResult
from gpudoc.runs.record import RunRecord

TYPED = ["python", "train.py", "--per_device_train_batch_size", "16"]


def _console() -> Console:
    return Console(out=io.StringIO(), err=io.StringIO(), colour=False)


def _attempt(run_id: str, mbs: int, accum: int, *, parent: str | None = None) -> RunRecord:
    argv = [*TYPED[:-1], str(mbs)]
    return RunRecord(id=run_id, command=list(TYPED), argv=argv, cwd="/x", status="failed", parent=parent,
                     profile={"knobs": {"micro_batch_size": mbs, "gradient_accumulation_steps": accum}})


def test_a_retried_attempt_shows_the_command_it_ran_and_what_changed_from_its_parent():
    first = _attempt("20260101-000000000-aaaaaa", 16, 2)
    second = _attempt("20260101-000001000-bbbbbb", 8, 4, parent=first.id)
    console = _console()
    # Only the retry is listed (`--last 1`): its parent is outside the window, handed in beside it.
    text(RunsResult(runs_dir="/x/runs", records=(second,), live_status=("failed",), before={second.id: first}),
         console)
    [_, row] = console.out.getvalue().splitlines()
    assert "accum 2→4, mbs 16→8" in row
    assert row.endswith("python train.py --per_device_train_batch_size 8")


def test_a_run_with_nothing_to_compare_with_changed_nothing():
    only = _attempt("20260101-000000000-aaaaaa", 16, 2)
    console = _console()
    text(RunsResult(runs_dir="/x/runs", records=(only,), live_status=("failed",)), console)
    assert console.out.getvalue().splitlines()[1].split()[6] == "-"


def test_runs_show_leads_with_what_ran_and_keeps_what_was_typed():
    record = _attempt("20260101-000001000-bbbbbb", 4, 8)
    console = _console()
    text(RunShowResult(record=record, live_status="failed", start=None, end=None, used={}, total={}), console)
    out = console.out.getvalue()
    assert "  command: python train.py --per_device_train_batch_size 4\n" in out
    assert "  as typed: python train.py --per_device_train_batch_size 16\n" in out


def test_boolean_knobs_read_as_the_profile_and_fix_write_them():
    before = _attempt("20260101-000000000-aaaaaa", 16, 2)
    after = _attempt("20260101-000001000-bbbbbb", 16, 2, parent=before.id)
    before.profile["knobs"]["gradient_checkpointing"] = False
    after.profile["knobs"]["gradient_checkpointing"] = True
    shown, listed, diffed = _console(), _console(), _console()
    text(RunShowResult(record=after, live_status="failed", start=None, end=None, used={}, total={}), shown)
    text(RunsResult(runs_dir="/x/runs", records=(after,), live_status=("failed",), before={after.id: before}),
         listed)
    text(RunsDiffResult(a=before.id, b=after.id, knobs=(("gradient_checkpointing", False, True),), env=(),
                        edits=(), outcome=()), diffed)
    assert "gradient_checkpointing=true" in shown.out.getvalue()
    assert "ckpt false→true" in listed.out.getvalue()
    assert "gradient_checkpointing: false -> true" in diffed.out.getvalue()
    assert not any(word in out.out.getvalue() for out in (shown, listed, diffed) for word in ("True", "False"))


def _ended(killed_by, interrupted_by) -> str:
    record = _attempt("20260101-000000000-aaaaaa", 16, 2)
    console = _console()
    text(RunResult(record=record, exit_code=128 + (interrupted_by or killed_by), log_path="/x/output.log",
                   killed_by=killed_by, interrupted_by=interrupted_by), console)
    return console.out.getvalue().splitlines()[1].split(" s: ", 1)[1]


def test_the_end_says_the_job_was_killed_after_the_users_signal_only_when_it_took_another_one():
    import signal

    # Python's KeyboardInterrupt re-raised as SIGINT: the job died of the user's own Ctrl-C.
    assert _ended(signal.SIGINT, signal.SIGINT) == "exit 130 (SIGINT from the user)"
    assert _ended(signal.SIGKILL, signal.SIGTERM) == "exit 143 (SIGTERM from the user; the job was then killed by SIGKILL)"
    assert _ended(signal.SIGKILL, None) == "exit 137 (killed by SIGKILL)"


def test_a_failed_attempt_sends_the_user_to_fix_unless_retry_oom_relaunches_it():
    from dataclasses import replace

    def next_lines(record: RunRecord, retries_left: int) -> list[str]:
        console = _console()
        text(RunResult(record=record, exit_code=1, log_path="/x/output.log", retries_left=retries_left), console)
        return [line.strip() for line in console.out.getvalue().splitlines() if line.strip().startswith("next:")]

    oom = replace(_attempt("20260101-000000000-aaaaaa", 16, 2), cause="gpu_oom")
    assert next_lines(oom, 0) == [f"next: gpudoc fix {oom.id}"]
    assert next_lines(oom, 1) == []  # gpudoc relaunches it (and says so if no rung is left)
    # Not an OOM, or stopped by the user: no relaunch follows, whatever retries are left.
    assert next_lines(replace(oom, cause="error"), 1) == [f"next: gpudoc fix {oom.id}"]
    assert next_lines(replace(oom, status="interrupted"), 1) == [f"next: gpudoc fix {oom.id}"]


def test_a_dry_run_writes_a_flags_values_as_the_command_line_has_them():
    console = _console()
    bindings = ({"knob": "micro_batch_size", "file": "command", "key": "--per_device_train_batch_size", "old": "16",
                 "new": "8", "added": False},
                {"knob": "run_name", "file": "command", "key": "--run_name", "old": "a b", "new": "c", "added": False},
                {"knob": "precision", "file": "cfg.json", "key": "fp16", "old": "16", "new": "8", "added": False})
    text(DryRunResult(argv=("python", "train.py"), env_set={}, file_edits=(), bindings=bindings), console)
    shown = console.out.getvalue()
    assert "micro_batch_size -> command --per_device_train_batch_size  16 -> 8\n" in shown
    assert 'run_name -> command --run_name  "a b" -> c\n' in shown  # a word with a space stays quoted
    assert 'precision -> cfg.json:fp16  "16" -> "8"\n' in shown  # a file's string stays a string


def test_a_dry_run_prune_says_what_would_be_left():
    for dry_run, said in ((True, "would remove 2 of 3 run(s) in /x/runs; 1 left"),
                          (False, "removed 2 of 3 run(s) in /x/runs; 1 left")):
        console = _console()
        text(PruneResult(runs_dir="/x/runs", removed=("a", "b"), kept_live=(), total=3, dry_run=dry_run), console)
        assert console.out.getvalue().splitlines()[0] == said


def _stepped(**steps) -> RunRecord:
    series = [{"step": n, "seconds": 0.5 if n != 30 else 1.0, "peak_allocated_bytes": n * 2**30,
               "peak_reserved_bytes": (n + 1) * 2**30} for n in (10, 20, 30, 40)]
    return RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd="/x", status="failed",
                     cause="error", steps={"count": 40, "seconds_per_step": 0.5, "samples_per_second": 64.0,
                                           "tokens_per_second": 32768.0, "peak_allocated_bytes": 40 * 2**30,
                                           "peak_reserved_bytes": 41 * 2**30, "capacity_bytes": 80 * 2**30,
                                           "total": 1000, "unit": "step", "source": "probe", "series": series,
                                           **steps})


def test_show_draws_step_time_and_the_allocators_peak_over_the_run_and_what_the_rest_would_take():
    console = _console()
    text(RunShowResult(record=_stepped(), live_status="failed", start=None, end=None, used={}, total={}), console)
    shown = console.out.getvalue()
    assert ("  steps: 40 of 1000 optimizer step(s), 0.5 s each (median, the first left out), 64 samples/s, "
            "32,768 tokens/s, peak allocated 40.0 GiB, reserved 41.0 GiB of 80.0 GiB (51%)") in shown
    assert "  at this pace the 1000 steps take 8m20s; 960 left: 8m00s more" in shown
    # The slow stretch (step 30) stands out; the peak grows toward the card's capacity.
    assert "  step time over the run (steps 10-40, full height = 1 s): ▅▅█▅" in shown
    assert "  peak reserved over the run (steps 10-40, full height = 80.0 GiB): ▂▃▄▅" in shown


def test_figures_read_from_the_frameworks_log_say_so_and_lightnings_count_batches():
    console = _console()
    record = _stepped(source="log:lightning", unit="batch", total=None, series=[], peak_allocated_bytes=None)
    text(RunShowResult(record=record, live_status="failed", start=None, end=None, used={}, total={}), console)
    shown = console.out.getvalue()
    assert "  steps: 40 batch(es), 0.5 s each (Lightning's progress bar)" in shown
    assert "at this pace" not in shown and "over the run" not in shown


def test_the_runs_end_says_the_step_time_what_the_rest_would_take_and_the_allocators_peak():
    console = _console()
    text(RunResult(record=_stepped(), exit_code=1, log_path="/x/output.log"), console)
    said = console.out.getvalue()
    assert "peak allocated 40.0 GiB, reserved 41.0 GiB of 80.0 GiB (51%)" in said
    assert "at this pace the 1000 steps take 8m20s; 960 left: 8m00s more" in said
    assert "over the run" not in said  # the chart is `runs show`'s


def test_the_list_shows_each_runs_step_time():
    console = _console()
    text(RunsResult(runs_dir="/x/runs", records=(_stepped(), _attempt("20260101-000001000-bbbbbb", 8, 4)),
                    live_status=("failed", "failed")), console)
    header, first, second = console.out.getvalue().splitlines()
    assert header.split()[6] == "STEP" and first.split()[6] == "0.5s" and second.split()[6] == "-"


def test_diff_says_what_a_rung_cost_in_tokens_and_allocator_peak():
    console = _console()
    text(RunsDiffResult(a="A", b="B", knobs=(), env=(), edits=(),
                        outcome=(("seconds_per_step", 0.78, 0.94), ("tokens_per_second", 1000.0, 830.0),
                                 ("peak_allocated_bytes", 8 * 2**30, 6 * 2**30))), console)
    said = console.out.getvalue()
    assert "    step time: 0.78 s -> 0.94 s (+21%)" in said
    assert "    tokens/s: 1,000 -> 830 (-17%)" in said
    assert "    peak allocated: 8.0 GiB -> 6.0 GiB (-25%)" in said


def test_an_oom_the_job_went_on_from_is_said_and_the_run_is_not_failed_by_it():
    console = _console()
    record = RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd="/x", status="succeeded",
                       oom_recovered={"rank": 0, "step": 0, "phase": "backward", "micro_batch_size": 8,
                                      "went_on_with": 2, "times": 2})
    text(RunShowResult(record=record, live_status="succeeded", start=None, end=None, used={}, total={}), console)
    shown = console.out.getvalue()
    assert ("  recovered from an OOM at micro batch 8 (rank 0, backward, after 0 step(s), 2 time(s)); the job went "
            "on with micro batch 2") in shown
    assert "out of memory:" not in shown and "fix" not in shown
