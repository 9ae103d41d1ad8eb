"""What `gpudoc fix` says of each rung: its saving, and whether that covers the OOM's shortfall."""

from __future__ import annotations

from gpudoc.ladder.model import Suggestion
from gpudoc.render.fix_text import fit_text, saving_text

MIB = 1 << 20


def test_each_rung_says_whether_it_is_expected_to_fit():
    halve = Suggestion("halve-micro-batch", {"micro_batch_size": [8, 4]}, expected_saving_bytes=2048 * MIB)
    assert saving_text(halve) == "expected to free about 2.0 GiB per GPU"
    assert fit_text(halve, 1000 * MIB) == "; expected to fit (more than the 1000.0 MiB short)"
    assert fit_text(halve, 4096 * MIB) == "; not expected to fit alone (the OOM was 4.0 GiB short)"


def test_no_claim_without_figures():
    unknown = Suggestion("gradient-checkpointing", {"gradient_checkpointing": [False, True]})
    assert fit_text(unknown, 1000 * MIB) == ""
    known = Suggestion("halve-micro-batch", {"micro_batch_size": [8, 4]}, expected_saving_bytes=MIB)
    assert fit_text(known, None) == ""
    upward = Suggestion("raise-micro-batch", {"micro_batch_size": [4, 8]}, expected_saving_bytes=-MIB)
    assert fit_text(upward, 1000 * MIB) == ""


def _footer(ladder) -> str:
    import io

    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.output import Console
    from gpudoc.render.text import text
    from gpudoc.results.fix import FixResult

    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    text(FixResult(diagnosis=Diagnosis(cause="gpu_oom", summary="OOM."), ladder=ladder, source="run x", run_id="x",
                   job_id=None, profile_path="gpudoc.toml", profile_env={}, target_path="gpudoc.toml", exit_code=0),
         console)
    return next(line for line in console.out.getvalue().splitlines() if line.startswith("Apply "))


def test_the_closing_line_names_what_apply_writes_when_the_allocator_rides_with_the_next_rung():
    from gpudoc.ladder.model import LadderResult

    alloc = Suggestion("expandable-segments", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
                       expected_saving_bytes=100 * MIB)
    halve = Suggestion("halve-micro-batch", {"micro_batch_size": [8, 4]})
    short = LadderResult(suggestions=[alloc, halve], shortfall_bytes=4096 * MIB)
    chosen = short.first_profile_change()
    assert chosen is not None and chosen.rung == "expandable-segments+halve-micro-batch"
    assert _footer(short).startswith(f"Apply {chosen.rung} (1 and 2 in one relaunch")
    enough = LadderResult(suggestions=[alloc, halve], shortfall_bytes=10 * MIB)
    assert _footer(enough).startswith("Apply the first change with `gpudoc fix --apply`")
