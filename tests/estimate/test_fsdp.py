"""torch FSDP between micro batches: the gradients stay unsharded until the last one (FSDP1's no_sync,
of whole flat parameters under LoRA; a pipeline stage's parameters gathered too) unless the job's loop
reduces every micro batch (torchtune's recipes), and the published FSDP rows written as FSDP through the
user's path."""

from __future__ import annotations

import pytest

from gpudoc.estimate import estimate_inputs, terms
from gpudoc.estimate.history import correction_from_history
from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup, inputs_from_profile
from gpudoc.estimate.model import compute_phases
from gpudoc.profiles.model import Profile
from gpudoc.runs.record import RunRecord
from tests.conftest import MEMORY_CASES
from tests.estimate.cases import load_records
from tests.estimate.user_path import profile_toml, run_case

# Llama-2-7B's shapes: 32 blocks of 202M parameters, a 32000-token embedding and head.
LLAMA2 = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, params=6_738_415_616,
                    gated_mlp=True)
EMBEDDINGS = 2 * 32000 * 4096
BY_ID = {r["id"]: r for r in load_records(MEMORY_CASES)}


def _phases(shape: ModelShape = LLAMA2, **setup: object):
    base: dict = {"micro_batch_size": 4, "seq_len": 1024, "precision": "bf16-true", "fsdp": True, "world_size": 2,
                  "gradient_checkpointing": "full"}
    return compute_phases(Inputs(shape=shape, setup=TrainSetup(**{**base, **setup})))


def test_lora_under_fsdp_accumulates_the_whole_blocks_gradients_until_the_last_micro_batch():
    one = _phases(lora_rank=8, lora_targets=("q", "v"))
    many = _phases(lora_rank=8, lora_targets=("q", "v"), gradient_accumulation_steps=16)
    blocks = LLAMA2.params - EMBEDDINGS
    # Each block's flat parameter trains (its adapters), so its unsharded bf16 gradient spans all of it.
    assert many.forward_backward["gradients"] == pytest.approx(2 * blocks)
    assert one.forward_backward["gradients"] == 0  # one micro batch: reduced at once, then freed
    # The step sees the sharded gradients: the adapters' share only.
    assert many.optimizer_step["gradients"] == one.optimizer_step["gradients"] < 1e8
    assert any("unsharded until the last micro batch" in n and "frozen weights too" in n for n in many.notes)
    # A full fine-tune keeps every parameter's gradient; DeepSpeed ZeRO-3 reduces every micro batch.
    full = _phases(gradient_accumulation_steps=16)
    assert full.forward_backward["gradients"] == pytest.approx(2 * LLAMA2.params)
    deepspeed = _phases(fsdp=False, zero_stage=3, gradient_accumulation_steps=16)
    assert deepspeed.forward_backward["gradients"] == pytest.approx(2 * LLAMA2.params / 2)  # its share


def test_a_pipeline_stage_under_fsdp_keeps_its_parameters_gathered_between_micro_batches():
    stage = _phases(precision="bf16", world_size=16, pipeline_parallel=2, gradient_accumulation_steps=8)
    flat = _phases(precision="bf16", world_size=8, gradient_accumulation_steps=8)
    share = stage.optimizer_step["weights"]
    # Half the blocks on this stage, gathered in bf16 beside its fp32 shard.
    assert stage.forward_backward["weights"] - share == pytest.approx(LLAMA2.params / 2 * 2, rel=0.1)
    assert flat.forward_backward["weights"] == flat.optimizer_step["weights"]
    assert any("pipeline stage" in n for n in stage.notes)


@pytest.mark.parametrize("case", ["lit-25", "lit-28", "titan-13", "tt2-07"])
def test_the_published_fsdp_rows_are_written_as_fsdp_and_no_longer_under_predicted(tmp_path, case):
    """LitGPT's LoRA under Fabric's FSDPStrategy (no_backward_sync over 16 micro batches), torchtitan's
    405B in 8 pipeline stages and torchtune's 70B full fine-tune (its sharded gradients reserved beside
    the activations): measured 13.45 GB, 23.39 GB, 82.5 GiB and 70.4 GB reserved."""
    written = profile_toml(BY_ID[case], with_config=False)
    assert "fsdp = true" in written and "zero_stage" not in written
    result = run_case(BY_ID[case], tmp_path, with_config=False)
    assert result.error is not None and -0.10 <= result.error <= 0.15, result


def test_a_torchtune_recipe_under_fsdp_reduces_every_micro_batch(tmp_path):
    """torchtune's distributed recipes call backward on every micro batch, never under no_sync: each GPU
    accumulates only its share of the gradients, however many micro batches a step takes."""
    lora = {"lora_rank": 8, "lora_targets": ("q", "v"), "gradient_accumulation_steps": 16}
    torchtune = _phases(**lora, framework="torchtune")
    fabric = _phases(**lora, framework="litgpt")  # Fabric's no_backward_sync: whole blocks until the last
    assert torchtune.forward_backward["gradients"] == pytest.approx(torchtune.optimizer_step["gradients"])
    assert torchtune.forward_backward["gradients"] < 1e8  # the adapters' share
    assert fabric.forward_backward["gradients"] > 100 * torchtune.forward_backward["gradients"]
    assert any("reduce-scattered every micro batch" in n for n in torchtune.notes)
    full = _phases(gradient_accumulation_steps=16, framework="torchtune")
    assert full.forward_backward["gradients"] == pytest.approx(2 * LLAMA2.params / 2)  # its share, not the whole
    # The framework as the profile names it ([bind] args), or as gpudoc reads it from the job's command.
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    profile = Profile(name="p", path=path, chain=(path,), bind={"args": "torchtune"}, launch={"nproc_per_node": 2},
                      model={"hidden": 4096, "layers": 32, "heads": 32, "ffn": 11008, "vocab": 32000},
                      train={"micro_batch_size": 2, "max_seq_len": 1024, "precision": "bf16-true", "fsdp": True,
                             "gradient_accumulation_steps": 8})
    assert inputs_from_profile(profile).setup.framework == "torchtune"


def _full(**setup: object) -> Inputs:
    """Llama-2-7B fully fine-tuned under FSDP on 8 GPUs, its optimizer's states paged to the host."""
    base: dict = {"micro_batch_size": 4, "seq_len": 2048, "precision": "bf16-true", "fsdp": True, "world_size": 8,
                  "gradient_checkpointing": "full", "offload_optimizer": True}
    return Inputs(shape=LLAMA2, setup=TrainSetup(**{**base, **setup}))


def _plain_slack(inputs: Inputs) -> float:
    est, phases = estimate_inputs(inputs), compute_phases(inputs)
    return est.slack_bytes - terms.allocator_slack_bytes(est.peak_bytes, phases.resident, expandable_segments=False)


def test_fsdp_reserves_its_sharded_gradients_beside_the_activations_peak():
    """FSDP allocates the gradients' shards on its reduce-scatter stream, whose blocks the caching
    allocator never gives to the compute stream's requests, nor the activations' freed blocks to it:
    the reserve holds both."""
    shard = compute_phases(_full()).optimizer_step["gradients"]
    assert shard == pytest.approx(2 * LLAMA2.params / 8)
    assert _plain_slack(_full()) == pytest.approx(shard, abs=2)
    assert any("reduce-scattered on a stream of their own" in n for n in estimate_inputs(_full()).notes)
    # Accumulated between micro batches the shards are in the peak already; DeepSpeed's ZeRO-3 is not FSDP.
    assert _plain_slack(_full(gradient_accumulation_steps=4)) == pytest.approx(0, abs=2)
    assert _plain_slack(_full(fsdp=False, zero_stage=3)) == pytest.approx(0, abs=2)
    assert _plain_slack(_full(offload_params=True)) == pytest.approx(0, abs=2)  # FSDP's CPU offload: to the host


def test_a_measured_fsdp_run_is_read_back_without_the_reserve_beside_its_peak():
    """A run that measured exactly the estimate's pool corrects nothing: the inverse takes the shards'
    reserve off with the slack and the context."""
    inputs = _full()
    knobs = {"micro_batch_size": 4, "max_seq_len": 2048, "precision": "bf16-true", "fsdp": True,
             "gradient_checkpointing": True, "offload_optimizer": True}
    run = RunRecord(id="r1", command=["train"], cwd=".", status="ok", exit_code=0,
                    profile={"name": "p", "knobs": knobs},
                    peak_memory_bytes={"0": int(estimate_inputs(inputs).total_bytes)})
    correction = correction_from_history(inputs, [run])
    assert correction is not None and correction.per_sample_scale == pytest.approx(1.0, abs=0.01)
