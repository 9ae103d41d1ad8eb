"""The substring gate lets through every line a signature could match, and a big log read
through it gets the same diagnosis as read line by line."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.diagnose import text as text_module
from gpudoc.diagnose.gate import candidate_lines, fold, with_context
from gpudoc.diagnose.markers import MARKER
from gpudoc.diagnose.signatures import PREFILTER
from gpudoc.diagnose.text import diagnose_text
from tests.conftest import ERRORS_CORPUS


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.from_regex(PREFILTER), st.text(max_size=40)), min_size=1, max_size=8))
def test_every_line_the_prefilter_accepts_is_a_candidate(pieces):
    lines = "\n".join(pieces).splitlines()
    wanted = {i for i, line in enumerate(lines) if PREFILTER.search(line)}
    assert wanted <= set(candidate_lines(lines))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.from_regex(MARKER), st.just("Traceback (most recent call last):"), st.text(max_size=40)),
                min_size=1, max_size=8))
def test_every_failure_marker_line_is_a_candidate(pieces):
    lines = "\n".join(pieces).splitlines()
    wanted = {i for i, line in enumerate(lines) if MARKER.search(line) or line.startswith("Traceback")}
    assert wanted <= set(candidate_lines(lines))


def test_letters_ignorecase_equates_with_ascii_fold_to_ascii():
    # The Basic Multilingual Plane: no letter above it case-matches an ASCII one (checked once, 5 s).
    odd = [chr(c) for c in range(128, 0x10000)
           if re.fullmatch("[a-z]", chr(c), re.IGNORECASE) and not re.fullmatch("[a-z]", fold(chr(c)))]
    assert odd == []


def test_context_windows_merge_and_stay_in_bounds():
    assert with_context([0, 3, 50], 52, before=2, after=2) == [0, 1, 2, 3, 4, 5, 48, 49, 50, 51]
    assert with_context([], 10) == []


def _corpus():
    with open(ERRORS_CORPUS, encoding="utf-8") as handle:
        return [json.loads(row) for row in handle]


NOISE = "".join(f"[rank{i % 4}]: step {i} loss {2.0 / (i + 1):.4f} lr 3e-04 it/s 7.1\n" for i in range(600))
# The gate's threshold, lowered for these tests: what they compare (the gated reading against the
# whole one) does not depend on it, and the whole reading of a log past the real 256 KB costs a
# third of a second per case, over a hundred cases.
GATE_FOR_TESTS = 16 * 1024


@pytest.mark.parametrize("case", _corpus(), ids=lambda c: c["id"])
def test_a_big_log_through_the_gate_gets_the_same_diagnosis(case, monkeypatch):
    padded = NOISE + case["log"] + "\n" + NOISE[:5000]
    monkeypatch.setattr(text_module, "GATE_ABOVE_CHARS", GATE_FOR_TESTS)
    assert len(padded) > text_module.GATE_ABOVE_CHARS
    gated = diagnose_text(padded)
    monkeypatch.setattr(text_module, "GATE_ABOVE_CHARS", len(padded) + 1)
    assert diagnose_text(padded).to_dict() == gated.to_dict()


@pytest.mark.parametrize("text", ["a\nb error\nc\n", "a\nb error\nc", "x\r\ny error\n", "é\nfatal\n", "\n\nerror", ""])
def test_the_fast_split_agrees_with_splitlines(text):
    from gpudoc.diagnose.gate import split_with_candidates

    lines, hits = split_with_candidates(text)
    assert lines == text.splitlines()
    assert hits == candidate_lines(text.splitlines())
