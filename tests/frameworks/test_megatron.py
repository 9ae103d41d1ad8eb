"""Megatron-LM's flags: the accumulation it derives from --global-batch-size over the data-parallel
ranks (the world over tensor x pipeline parallel), written back there; its distributed optimizer read
as ZeRO-1; its activation recomputation read and written as gradient_checkpointing."""

from __future__ import annotations

import json

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.errors import ProfileError
from gpudoc.profiles.from_job import job_profile
from tests.conftest import gpudoc_cli

# NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (commit 4b36c6c4), its arrays expanded:
# 8 GPUs in tensor 2 x pipeline 2 are 2 data-parallel ranks; 64 // (1 x 2) = 32 micro batches a step.
COMMAND = ["torchrun", "--nproc_per_node", "8", "--nnodes", "1", "--master_addr", "localhost", "--master_port", "6000",
           "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "256", "--num-attention-heads", "8",
           "--seq-length", "512", "--max-position-embeddings", "512", "--micro-batch-size", "1",
           "--global-batch-size", "64", "--train-iters", "10", "--weight-decay", "0.1", "--fp16", "--lr", "6.0e-5",
           "--use-mcore-models", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]


def test_the_global_batch_is_read_as_megatron_divides_it_through_the_dry_run(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("from megatron.training import pretrain\n")
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    assert read["micro_batch_size"] == (1, "argv:--micro-batch-size")
    assert read["gradient_accumulation_steps"] == (32, "argv:--global-batch-size")
    assert read["max_seq_len"] == (512, "argv:--seq-length") and read["precision"] == ("fp16", "argv:--fp16")
    assert "zero_stage" not in read  # no distributed optimizer: nothing sharded, nothing said


def test_the_distributed_optimizer_is_read_as_zero_stage_1(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("from megatron.training import pretrain\n")
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, "--use-distributed-optimizer", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    assert read["zero_stage"] == (1, "argv:--use-distributed-optimizer")


def test_zero_stage_1_is_written_as_the_distributed_optimizer_and_no_flag_shards_more(tmp_path):
    profile = job_profile(COMMAND, tmp_path)
    plan = plan_bindings(profile.with_train({"zero_stage": 1}).for_planning(), COMMAND, cwd=tmp_path)
    assert plan.argv.count("--use-distributed-optimizer") == 1 and plan.argv[:len(COMMAND)] == COMMAND
    sharded = [*COMMAND, "--use-distributed-optimizer"]
    plan = plan_bindings(job_profile(sharded, tmp_path).with_train({"zero_stage": 0}).for_planning(), sharded,
                         cwd=tmp_path)
    assert "--use-distributed-optimizer" not in plan.argv
    with pytest.raises(ProfileError, match=r"megatron: --use-distributed-optimizer shards the optimizer's state"):
        plan_bindings(profile.with_train({"zero_stage": 2}).for_planning(), COMMAND, cwd=tmp_path)


def test_a_changed_accumulation_is_written_as_the_global_batch_over_the_data_parallel_ranks(tmp_path):
    profile = job_profile(COMMAND, tmp_path)
    assert profile.launch == {"nproc_per_node": 8, "nnodes": 1, "tensor_parallel": 2, "pipeline_parallel": 2}
    assert (profile.data_parallel_size, profile.global_batch_size) == (2, 64)
    plan = plan_bindings(profile.with_train({"gradient_accumulation_steps": 16, "precision": "bf16"}).for_planning(),
                         COMMAND, cwd=tmp_path)
    assert plan.argv[plan.argv.index("--global-batch-size") + 1] == "32"  # 1 x 16 x 2
    assert "--fp16" not in plan.argv and plan.argv[-1] == "--bf16"
    # A global batch the ranks do not divide: Megatron refuses it, and so nothing is read.
    odd = [*COMMAND[:COMMAND.index("--global-batch-size") + 1], "63", *COMMAND[COMMAND.index("--global-batch-size") + 2:]]
    reading = job_profile(odd, tmp_path).job
    assert reading is not None and "gradient_accumulation_steps" not in reading.values
    assert any("Megatron refuses it" in note for note in reading.notes)


FULL = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]


@pytest.mark.parametrize(("flags", "read"), [
    ([], (False, "default:megatron")),
    (["--recompute-activations"], ("selective", "argv:--recompute-activations")),
    (["--recompute-granularity", "selective"], ("selective", "argv:--recompute-granularity")),
    (FULL, (True, "argv:--recompute-granularity")),
    # Units of two layers, or only some layers checkpointed: not every layer, and so not read.
    (["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"], None),
    (["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "4"], None),
])
def test_recomputation_is_read_as_checkpointing_where_it_is_every_layer_or_the_attention_core(tmp_path, flags, read):
    reading = job_profile([*COMMAND, *flags], tmp_path).job
    assert reading is not None
    got = reading.knobs.get("gradient_checkpointing")
    assert (None if got is None else (got.value, got.where)) == read
    if read is None:
        assert any("gradient_checkpointing was not read" in note for note in reading.notes)


@pytest.mark.parametrize(("start", "mode", "written"), [
    ([], True, FULL),
    (["--recompute-activations"], True, FULL),
    (FULL, "selective", ["--recompute-granularity", "selective"]),
    (FULL, False, []),
    (["--recompute-activations"], False, []),
])
def test_checkpointing_is_written_as_megatrons_recomputation_flags(tmp_path, start, mode, written):
    command = [*COMMAND, *start]
    plan = plan_bindings(job_profile(command, tmp_path).with_train({"gradient_checkpointing": mode}).for_planning(),
                         command, cwd=tmp_path)
    recompute = [t for i, t in enumerate(plan.argv) if t.startswith("--recompute") or
                 (i and plan.argv[i - 1].startswith("--recompute") and not t.startswith("-"))]
    assert recompute == written
    assert plan.argv[:len(COMMAND)] == COMMAND
