"""DeepSpeed ZeRO-3 on one GPU: the parameters its trace keeps gathered, with the job's settings."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpudoc.estimate import estimate, zero3, zero_settings
from gpudoc.job.knobs import read_job
from gpudoc.profiles.model import Profile

DEFAULTS = zero_settings.settings((), 4096)
LLAMA_8B = {"model": 8.03e9, "block": 218_112_000.0, "blocks": 32, "head": 128256 * 4096.0,
            "largest": 128256 * 4096.0, "small": 0.0, "world": 1}


def test_the_head_and_the_last_blocks_within_the_reuse_distance_stay_gathered():
    # Llama-3.1-8B: the last block's reuse comes after the head's forward and backward (1.05e9 elements),
    # past the default distance: only the head stays, with the prefetch and the head's partition copy.
    base = zero3.gathered_params(DEFAULTS, recompute=False, **LLAMA_8B)
    assert base == pytest.approx(2 * LLAMA_8B["head"] + 5e7)
    far = zero_settings.settings((("stage3_max_reuse_distance", 4e9),), 4096)
    kept = zero3.gathered_params(far, recompute=False, **LLAMA_8B)
    # Seven blocks: the k-th from the end is reused after 2 k blocks and two heads.
    assert kept == pytest.approx(2 * LLAMA_8B["head"] + 7 * LLAMA_8B["block"])  # over max_live: no prefetch
    # Checkpointing runs each later block's forward again first: fewer blocks fit the distance.
    assert zero3.gathered_params(far, recompute=True, **LLAMA_8B) == \
        pytest.approx(2 * LLAMA_8B["head"] + 5 * LLAMA_8B["block"])
    # Nothing kept at distance 0; on eight GPUs the partition copy is an eighth.
    none = zero_settings.settings((("stage3_max_reuse_distance", 0),), 4096)
    assert zero3.gathered_params(none, recompute=False, **{**LLAMA_8B, "world": 8}) == \
        pytest.approx(5e7 + LLAMA_8B["head"] / 8)


def test_a_small_model_is_gathered_whole_and_persistent_parameters_stay():
    small = {**LLAMA_8B, "model": 1.2e8, "small": 1e5}
    assert zero3.gathered_params(DEFAULTS, recompute=False, **small) == pytest.approx(1.2e8 + LLAMA_8B["head"])
    off = zero_settings.settings((("stage3_param_persistence_threshold", 0),), 4096)
    with_small = zero3.gathered_params(DEFAULTS, recompute=False, **{**LLAMA_8B, "small": 1e6})
    assert with_small - zero3.gathered_params(off, recompute=False, **{**LLAMA_8B, "small": 1e6}) == 1e6


def test_the_estimate_reads_the_jobs_deepspeed_json(tmp_path):
    """The DeepSpeed JSON a job's command names (read as gpudoc run reads the command) moves what
    ZeRO-3 is estimated to hold gathered, and the note says where the settings came from."""
    (tmp_path / "train.py").write_text("import deepspeed\n")
    train = {"max_seq_len": 512, "precision": "bf16", "zero_stage": 3, "offload_params": True, "offload_optimizer": True}
    model = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256}

    def estimated(zero: dict) -> tuple[int, str]:
        (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3, **zero}}))
        job = read_job(["deepspeed", "train.py", "--deepspeed_config", "ds.json"], tmp_path)
        est = estimate(Profile(name="p", path=tmp_path / "gpudoc.toml", train=train, model=model, job=job))
        return est.breakdown["workspace"], next(n for n in est.notes if n.startswith("ZeRO-3 holds"))

    default, said = estimated({})
    assert said.endswith("from DeepSpeed's defaults; fsdp = true for FSDP's two units")
    far, said = estimated({"stage3_max_reuse_distance": 4e9})
    assert "from the job's DeepSpeed JSON (stage3_max_reuse_distance 4e+09; DeepSpeed's defaults for the rest)" in said
    assert far - default == pytest.approx(2 * (7 * 218_112_000 - 5e7), rel=1e-3)  # seven blocks, no prefetch


def test_under_zero_3_every_linear_layer_keeps_its_input_a_frozen_ones_too():
    """zero.Init's F.linear (LinearFunctionForZeroStage3) saves input and weight whatever trains: a
    LoRA job on q and v also keeps the MLP's inputs (gate/up's, down's) and the head's, which torch's
    own linear drops for frozen weights."""
    from gpudoc.estimate.inputs import ModelShape, TrainSetup
    from gpudoc.estimate.model import activation_bytes

    shape = ModelShape(layers=4, hidden=256, heads=4, kv_heads=4, ffn=1024, vocab=1000, params=5e6, gated_mlp=True)
    # bf16 adapters that take their layer's input as it is (a framework's own, as FSDP's casts leave peft's too).
    lora = TrainSetup(micro_batch_size=2, seq_len=128, precision="bf16-true", lora_rank=8, lora_targets=("q", "v"),
                      lora_adapters="own")
    plain, _, _ = activation_bytes(shape, lora)
    deepspeed, _, _ = activation_bytes(shape, replace(lora, zero_stage=3, offload_params=True, offload_optimizer=True))
    tokens = 2 * 128
    assert deepspeed - plain == 2 * tokens * (4 * (256 + 1024) + 256)  # bf16: per block gate/up and down; the head
    fsdp, _, _ = activation_bytes(shape, replace(lora, zero_stage=3, world_size=2, fsdp=True))
    assert fsdp == plain
