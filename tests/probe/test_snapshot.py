"""The CUDA-only part of the probe: PyTorch's memory history, armed with [run] snapshot = "on-oom".
This machine has no CUDA, so the history is driven through a stand-in for ``torch.cuda.memory`` that
hands back a snapshot in PyTorch's documented format (tests/fixtures/memory/snapshot-format.json);
bench/gpu runs the real thing on a lent GPU."""

from __future__ import annotations

import gzip
import importlib.util
import json
import pickle
from types import SimpleNamespace

from tests.conftest import FIXTURES, REPO

SNAPSHOT = json.loads((FIXTURES / "memory" / "snapshot-format.json").read_text())


def _module():
    spec = importlib.util.spec_from_file_location("_gpudoc_probe_snapshot_test", REPO / "gpudoc" / "probe" / "snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeCudaMemory:
    """``torch.cuda.memory``'s three calls the probe makes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def _record_memory_history(self, enabled: object = "all", **kwargs: object) -> None:
        self.calls.append(("record", enabled, kwargs))

    def _snapshot(self) -> dict:
        return SNAPSHOT


def _torch(available: bool = True) -> SimpleNamespace:
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: available, memory=FakeCudaMemory()))


def test_the_largest_live_allocations_are_named_by_the_first_line_outside_torch():
    top = _module().top_allocations(SNAPSHOT)
    assert top == [
        {"where": "model.py:88 forward", "module": "model", "bytes": 1073741824 + 289406976},
        {"where": "train.py:61 main", "module": "train", "bytes": 524288000},
        {"where": "unknown", "module": None, "bytes": 2097152},  # recorded before the history was armed
    ]  # inactive and pending-free blocks hold nothing live


def test_history_is_armed_stopped_past_the_failed_step_and_dumped_compressed(tmp_path):
    snapshot = _module()
    torch = _torch()
    history = snapshot.History(torch, until=3)
    history.arm()
    assert torch.cuda.memory.calls == [("record", "all", {"max_entries": snapshot.MAX_ENTRIES, "stacks": "python"})]
    for step in range(1, 3 + snapshot.STEPS_PAST + 1):
        history.after_step(step)
    assert history.recording and len(torch.cuda.memory.calls) == 1  # still inside the failed step's window
    path, top = history.dump(str(tmp_path / "probe"), rank=1)
    assert path == str(tmp_path / "probe" / "snapshot-rank-1.pickle.gz")
    with gzip.open(path, "rb") as dumped:
        assert pickle.load(dumped) == SNAPSHOT  # noqa: S301 - the file this test just had written
    assert top[0]["where"] == "model.py:88 forward"
    history.after_step(3 + snapshot.STEPS_PAST + 1)
    assert torch.cuda.memory.calls[-1] == ("record", None, {}) and not history.recording
    assert history.dump(str(tmp_path / "probe"), rank=1) == (None, [])  # stopped: nothing to dump


def test_without_cuda_nothing_is_recorded():
    torch = _torch(available=False)
    history = _module().History(torch, until=None)
    history.arm()
    assert torch.cuda.memory.calls == [] and not history.recording
