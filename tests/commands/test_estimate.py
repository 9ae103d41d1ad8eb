"""`gpudoc estimate` as a function: capacity sources, history, exit status."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpudoc.commands.estimate import estimate_command
from gpudoc.errors import ProfileError, UsageError
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from gpudoc.workspace import Workspace
from tests.conftest import captured_workspace

PROFILE = """
[train]
micro_batch_size = 2
max_seq_len = 2048
precision = "bf16-true"
lora_rank = 8
gradient_checkpointing = true

[model]
layers = 32
hidden = 4096
heads = 32
ffn = 11008
vocab = 32000
"""


class _Machine(Workspace):
    """A workspace whose facts come from ``facts_source`` (a callable) instead of NVML."""

    facts_source = None

    def gather(self, **kwargs):
        return self.facts_source() if self.facts_source else super().gather(**kwargs)


def _run(*, gather=None, home=None, **kw):
    ws = captured_workspace(environ={"GPUDOC_HOME": str(home)} if home else None, cls=_Machine)
    ws.facts_source = gather
    status = estimate_command(ws, **kw)
    return status, ws.console.out.getvalue()


def _gather_with(total_bytes):
    gpu = SimpleNamespace(index=0, name="Fake GPU", memory_total_bytes=total_bytes)
    return lambda: SimpleNamespace(gpus=[gpu])


def test_capacity_from_the_detected_gpu(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    status, out = _run(as_json=True, gather=_gather_with(24 * 1024**3))
    doc = json.loads(out)
    assert status == 0
    assert doc["gpu_total_bytes"] == 24 * 1024**3 and doc["gpu_total_from"] == "GPU 0 (Fake GPU)"
    assert doc["max_micro_batch_size"] >= 2
    assert set(doc["breakdown"]) >= {"weights", "gradients", "optimizer", "activations", "logits"}
    assert doc["peak_bytes"] == sum(doc["breakdown"].values())
    assert doc["source"] == "model"


def test_no_gpu_anywhere_still_estimates(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    status, out = _run(gather=broken)
    assert status == 0
    assert "GPU capacity unknown" in out and "peak allocated" in out


def test_does_not_fit_is_exit_1(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    status, out = _run(gpu_memory_gib=8.0, micro_batch_size=2)
    assert status == 1
    assert "does not fit" in out


def test_history_of_the_same_profile_corrects_the_estimate(isolated_home):
    path = isolated_home / "gpudoc.toml"
    path.write_text(PROFILE)
    store = RunStore(isolated_home / ".gpudoc")
    store.create(RunRecord(id="r1", command=["train"], cwd=".", status="ok", exit_code=0,
                           profile={"name": "gpudoc", "path": str(path),
                                    "knobs": {"micro_batch_size": 2, "max_seq_len": 2048, "precision": "bf16-true",
                                              "lora_rank": 8, "gradient_checkpointing": True}},
                           peak_memory_bytes={"0": 20 * 1024**3}))
    store.create(RunRecord(id="r2", command=["train"], cwd=".", status="ok", exit_code=0,
                           profile={"name": "other", "knobs": {"micro_batch_size": 2, "max_seq_len": 2048}},
                           peak_memory_bytes={"0": 70 * 1024**3}))
    _, plain = _run(as_json=True, gpu_memory_gib=80.0, home=isolated_home / "empty")
    _, corrected = _run(as_json=True, gpu_memory_gib=80.0)
    plain, corrected = json.loads(plain), json.loads(corrected)
    assert corrected["source"] == "model corrected by 1 measured run"
    assert corrected["peak_bytes"] > plain["peak_bytes"]


def test_bad_switches_and_profiles_without_a_model(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmax_seq_len = 1024\n")
    with pytest.raises(ProfileError, match="no \\[model\\] table"):
        _run()
    with pytest.raises(UsageError, match="--gpu-memory"):
        _run(gpu_memory_gib=-1.0)
