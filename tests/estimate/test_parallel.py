"""[launch] tensor_parallel, pipeline_parallel and context_parallel divide what they divide, and a
layout the world size cannot hold is one error naming the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate import estimate
from gpudoc.estimate.inputs import inputs_from_profile
from gpudoc.estimate.model import compute_phases
from gpudoc.profiles.model import Profile

LLAMA_70B = {"hidden": 8192, "layers": 80, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 128256,
             "params": 70.6e9}
TRAIN = {"micro_batch_size": 1, "max_seq_len": 4096, "precision": "bf16-true", "gradient_checkpointing": True,
         "gradient_accumulation_steps": 16}


def _profile(tmp_path: Path, launch: dict, train: dict | None = None, model: dict | None = None) -> Profile:
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    return Profile(name="p", path=path, chain=(path,), model=model or LLAMA_70B,
                   train={**TRAIN, **(train or {})}, launch={"nproc_per_node": 8, **launch})


def _estimate(tmp_path: Path, launch: dict, train: dict | None = None, model: dict | None = None):
    return estimate(_profile(tmp_path, launch, train, model))


def _fb(tmp_path: Path, launch: dict, train: dict | None = None) -> dict:
    """The forward/backward phase's parts (the peak's breakdown may be the optimizer step's)."""
    return compute_phases(inputs_from_profile(_profile(tmp_path, launch, train))).forward_backward


def test_tensor_parallel_splits_the_weights_and_the_wide_activations(tmp_path):
    alone = _estimate(tmp_path, {"nproc_per_node": 1})
    tp = _estimate(tmp_path, {"tensor_parallel": 8})
    assert tp.breakdown["weights"] == pytest.approx(alone.breakdown["weights"] / 8, rel=0.02)
    assert tp.breakdown["logits"] == pytest.approx(alone.breakdown["logits"] / 8, rel=0.01)  # vocab-parallel
    # The norms and the residual stream stay whole on every GPU: less than alone, more than an eighth.
    plain = {"gradient_checkpointing": False}
    whole = _fb(tmp_path, {"nproc_per_node": 1}, plain)["activations"]
    assert whole / 8 < _fb(tmp_path, {"tensor_parallel": 8}, plain)["activations"] < whole / 2
    assert any("tensor_parallel = 8" in n for n in tp.notes)


def test_pipeline_parallel_splits_the_blocks_and_keeps_micro_batches_in_flight(tmp_path):
    alone = _estimate(tmp_path, {"nproc_per_node": 1})
    pp = _estimate(tmp_path, {"pipeline_parallel": 8})
    assert pp.breakdown["weights"] < alone.breakdown["weights"] / 5  # blocks / 8, embedding and head kept
    # 1F1B: the first stage holds 8 micro batches of its 10 layers: one micro batch through all 80.
    whole = _fb(tmp_path, {"nproc_per_node": 1})["activations"]
    assert _fb(tmp_path, {"pipeline_parallel": 8})["activations"] == pytest.approx(whole, rel=0.05)
    single = _fb(tmp_path, {"pipeline_parallel": 8}, {"gradient_accumulation_steps": 1})
    assert single["activations"] < whole / 2  # one micro batch through 10 of the 80 layers


def test_context_parallel_splits_the_sequence_and_the_shards(tmp_path):
    alone = _estimate(tmp_path, {"nproc_per_node": 1}, {"zero_stage": 3})
    cp = _estimate(tmp_path, {"context_parallel": 8}, {"zero_stage": 3})
    assert cp.breakdown["logits"] == pytest.approx(alone.breakdown["logits"] / 8, rel=0.01)
    whole = _fb(tmp_path, {"nproc_per_node": 1}, {"zero_stage": 3})["activations"]
    assert _fb(tmp_path, {"context_parallel": 8}, {"zero_stage": 3})["activations"] < whole / 6
    # ZeRO-3 shards over data parallel x context parallel: all 8 GPUs here.
    assert cp.breakdown["weights"] == pytest.approx(alone.breakdown["weights"] / 8, rel=0.01)


def test_a_405b_model_on_three_dimensions_is_not_many_times_a_card(tmp_path):
    llama_405b = {"hidden": 16384, "layers": 126, "heads": 128, "kv_heads": 8, "ffn": 53248, "vocab": 128256,
                  "params": 405.9e9}
    result = _estimate(tmp_path, {"nproc_per_node": 8, "nnodes": 64, "tensor_parallel": 8,
                                  "pipeline_parallel": 8}, {"zero_stage": 3, "precision": "bf16",
                                                            "gradient_accumulation_steps": 32},
                       model=llama_405b)
    assert result.total_bytes < 96 * 1024**3  # it trained on 96 GB cards (torchtitan, TP 8 x PP 8 x FSDP 8)
    # One micro batch's logits at a time on the last stage, a vocabulary-parallel eighth of them.
    assert result.breakdown["logits"] == pytest.approx(4096 * 128256 / 8 * 14, rel=0.01)


@pytest.mark.parametrize("launch", [{"tensor_parallel": 3}, {"tensor_parallel": 4, "pipeline_parallel": 4}])
def test_a_layout_the_world_cannot_hold_is_refused_naming_the_keys(tmp_path, launch):
    with pytest.raises(ProfileError, match=r"\[launch\] tensor_parallel x pipeline_parallel x context_parallel"):
        _estimate(tmp_path, launch)


def test_the_estimate_reports_the_layout_it_read(tmp_path):
    inputs = _estimate(tmp_path, {"tensor_parallel": 2, "context_parallel": 4}).inputs
    assert (inputs["tensor_parallel"], inputs["pipeline_parallel"], inputs["context_parallel"]) == (2, 1, 4)
