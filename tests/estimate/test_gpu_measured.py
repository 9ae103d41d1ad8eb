"""The formula against the real allocator: the GPU kit's twelve training steps, measured on an H100
(tests/fixtures/memory/h100-kit.jsonl), each through the user's path — the profile the kit writes
(bench/gpu/kit/grid.py: the SPEC's keys and the model's config.json) into ``gpudoc estimate --json``."""

from __future__ import annotations

import json
import statistics
import sys

import pytest

from gpudoc.commands.estimate import estimate_command
from tests.conftest import FIXTURES, REPO, captured_workspace
from tests.estimate.user_path import _NO_DRIVER, _SNAPSHOT
from tests.facts.fake_nvml import FakeNvml

sys.path.insert(0, str(REPO / "bench" / "gpu" / "kit"))
import grid  # the kit's one owner of how its cases become profiles

MEASURED = {r["id"]: r for r in map(json.loads, (FIXTURES / "memory" / "h100-kit.jsonl").read_text().splitlines())}


def _formula_error(case: dict, directory) -> float:
    grid.write_case(case, directory)
    backend = FakeNvml.from_snapshot(next(iter(sorted(_SNAPSHOT.rglob("*.xml")))), init_error=_NO_DRIVER)
    ws = captured_workspace(directory, nvml_backend=backend)
    estimate_command(ws, as_json=True)
    doc = json.loads(ws.console.out.getvalue())
    assert doc["source"] == "formula"
    measured = max(MEASURED[case["id"]]["allocated"].values())  # peak_bytes predicts the run's peak
    return (doc["peak_bytes"] - measured) / measured


@pytest.fixture(scope="module")
def errors(tmp_path_factory) -> dict[str, float]:
    root = tmp_path_factory.mktemp("kit-cases")
    return {case["id"]: _formula_error(case, root / case["id"]) for case in grid.cases()}


def test_every_kit_case_has_its_measurement():
    assert set(MEASURED) == {case["id"] for case in grid.cases()}


def test_no_case_is_under_predicted_by_more_than_ten_percent(errors):
    assert {k: round(e, 3) for k, e in errors.items() if e < -0.10} == {}


def test_gpt2s_composed_gelu_is_counted(errors):
    # transformers' gelu_new keeps tanh's output, 1 + tanh (fp32 under autocast) and 0.5 * x: without
    # them GPT-2 small read 19-28% under the allocator at 4-8 x 1024.
    gpt2 = {k: e for k, e in errors.items() if k.startswith("gpt2")}
    assert len(gpt2) == 4 and all(abs(e) <= 0.08 for e in gpt2.values()), gpt2


def test_the_median_error_is_within_five_percent(errors):
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05
