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
