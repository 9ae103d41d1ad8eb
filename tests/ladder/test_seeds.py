"""The five user guides in tests/fixtures/seeds/ as acceptance tests.

Each test rebuilds the guide's situation: a profile mirroring its GPUs, knobs and environment,
and an OOM log in real PyTorch format carrying the guide's numbers. ``gpudoc fix`` must propose
what the guide's author ended up doing, or something better-founded, in a sensible order.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpudoc.commands.fix import fix
from tests.conftest import SEEDS, captured_workspace, gpudoc_cli

OOM_TAIL = (
    " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    " to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def run_fix(tmp: Path, profile_text: str, log_text: str, *extra: str) -> tuple[int, dict]:
    (tmp / "job.toml").write_text(profile_text)
    (tmp / "oom.log").write_text(log_text)
    ws = captured_workspace(tmp)
    status = fix(
        ws,
        logs=[str(tmp / "oom.log")],
        profile_name=str(tmp / "job.toml"),
        allow_semantic="--allow-semantic" in extra,
        as_json=True,
    )
    return status, json.loads(ws.console.out.getvalue())


def rungs(payload: dict, key: str = "suggestions") -> list[str]:
    return [s["rung"] for s in payload[key]]


def get(payload: dict, rung: str, key: str = "suggestions") -> dict:
    return next(s for s in payload[key] if s["rung"] == rung)


def test_every_seed_guide_has_a_test():
    guides = sorted(p.name[:3] for p in SEEDS.glob("*.txt"))
    assert guides == ["000", "001", "002", "003", "004"]
    tested = {name.split("_")[2] for name in globals() if name.startswith("test_seed_")}
    assert tested >= set(guides)


# -- 001: 4x A10G, Llama-3.2-1B, HF Trainer + DeepSpeed ZeRO-2 -------------------------------

SEED_001_PROFILE = """\
description = "4x A10G, Llama-3.2-1B pretraining, DeepSpeed"

[gpu]
count = 4
name = "NVIDIA A10G"

[train]
micro_batch_size = 2              # per_device_train_batch_size
gradient_accumulation_steps = 64  # 2 x 64 x 4 GPUs = 512
max_seq_len = 2048
gradient_checkpointing = true
precision = "bf16"
zero_stage = 2
offload_optimizer = false
offload_params = false

[launch]
nproc_per_node = 4

[model]
arch = "decoder"
params = 1.24e9
layers = 16
hidden = 2048
heads = 32
kv_heads = 8
ffn = 8192
vocab = 128256
"""

SEED_001_LOG = """\
[rank2]: Traceback (most recent call last):
[rank2]:   File "/home/sagemaker-user/examples/greedy-lr/pre-train-llama3.2-1b.py", line 288, in <module>
[rank2]:     trainer.train()
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1976, in backward
[rank2]:     self.optimizer.backward(loss, retain_graph=retain_graph)
[rank2]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 2 has a total capacity of 22.19 GiB of which 3.80 GiB is free. Including non-PyTorch memory, this process has 18.38 GiB memory in use. Of the allocated memory 17.89 GiB is allocated by PyTorch, and 201.53 MiB is reserved by PyTorch but unallocated.""" + OOM_TAIL + """
W0412 10:31:07.118000 140 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 141 closing signal SIGTERM
E0412 10:31:08.533000 140 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1) local_rank: 2 (pid: 143) of binary: /opt/conda/bin/python3
"""


def test_seed_001_halves_batch_with_exact_accumulation_before_zero3(tmp_path):
    status, out = run_fix(tmp_path, SEED_001_PROFILE, SEED_001_LOG)
    assert status == 0
    d = out["diagnosis"]
    assert (d["cause"], d["rank"], d["gpu_index"]) == ("gpu_oom", 2, 2)
    order = rungs(out)
    assert "halve-micro-batch" in order and "zero-stage" in order
    assert order.index("halve-micro-batch") < order.index("zero-stage")
    halve = get(out, "halve-micro-batch")
    # What the author did: 2 -> 1 with accumulation 64 -> 128, global batch 512 kept.
    assert halve["changes"] == {"micro_batch_size": [2, 1], "gradient_accumulation_steps": [64, 128]}
    assert "512" in halve["why"]
    assert get(out, "zero-stage")["changes"] == {"zero_stage": [2, 3]}
    # The author also added expandable segments; gpudoc proposes it with the other no-cost rungs.
    expandable = [s for s in out["suggestions"] if s["rung"] == "expandable-segments"]
    assert expandable and order.index("expandable-segments") < order.index("halve-micro-batch")
    # Never the model, never the sequence length without permission.
    assert all(not s["semantic"] for s in out["suggestions"])


# -- 003: Qwen2.5-7B LoRA on one 24 GB card ---------------------------------------------------

SEED_003_PROFILE = """\
description = "1x 24 GB, Qwen2.5-7B LoRA r=128, fp16 base"

[gpu]
count = 1

[env]
TOKENIZERS_PARALLELISM = "false"

[train]
micro_batch_size = 2              # per_device_train_batch_size
gradient_accumulation_steps = 8   # effective batch 16
max_seq_len = 2048                # MAX_SEQ_LENGTH
gradient_checkpointing = true
precision = "fp16"
lora_rank = 128
quantization = "none"

[model]
arch = "decoder"
params = 7.6e9
layers = 28
hidden = 3584
heads = 28
kv_heads = 4
ffn = 18944
vocab = 152064
"""

SEED_003_LOG = """\
{'loss': 1.9342, 'grad_norm': 0.41, 'learning_rate': 0.0002, 'epoch': 0.01}
  1%|          | 12/1250 [01:31<2:36:40,  7.59s/it]Traceback (most recent call last):
  File "/home/user/ViSemPar_new1/train_baseline.py", line 412, in <module>
    trainer.train()
  File "/opt/conda/lib/python3.10/site-packages/torch/autograd/graph.py", line 768, in _engine_run_backward
    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity of 23.68 GiB of which 612.56 MiB is free. Process 31337 has 23.07 GiB memory in use. Of the allocated memory 21.14 GiB is allocated by PyTorch, and 1.47 GiB is reserved by PyTorch but unallocated.""" + OOM_TAIL + "\n"


def test_seed_003_never_shrinks_the_model_and_holds_back_sequence_length(tmp_path):
    status, out = run_fix(tmp_path, SEED_003_PROFILE, SEED_003_LOG)
    assert status == 0
    # The job's own "Process ... has" line is not another process.
    assert out["diagnosis"]["other_processes"] == []
    order = rungs(out)
    assert order[0] == "expandable-segments"  # 1.47 GiB reserved-but-unallocated >= 1.02 GiB asked
    assert get(out, "halve-micro-batch")["changes"] == {
        "micro_batch_size": [2, 1], "gradient_accumulation_steps": [8, 16]}
    assert all(not s["semantic"] for s in out["suggestions"])
    touched = {k for s in out["suggestions"] for k in s["changes"]}
    assert not touched & {"lora_rank", "quantization", "max_seq_len"}
    held = rungs(out, "semantic_held_back")
    assert held[0] == "shorter-sequences"
    # The LoRA rank (the author's "LAST RESORT") comes after, or not at all when its saving
    # cannot cover what the run was short of.
    if "smaller-lora-rank" not in held:
        reason = next(s["reason"] for s in out["skipped"] if s["rung"] == "smaller-lora-rank")
        assert "less than the" in reason


def test_seed_003_with_allow_semantic_shortens_sequences_after_non_semantic_rungs(tmp_path):
    _status, out = run_fix(tmp_path, SEED_003_PROFILE, SEED_003_LOG, "--allow-semantic")
    order = rungs(out)
    flags = [s["semantic"] for s in out["suggestions"]]
    assert flags == sorted(flags)  # every non-semantic rung first
    # The author's 2048 -> 1536, and the LoRA rank (their "LAST RESORT") only after it.
    assert get(out, "shorter-sequences")["changes"] == {"max_seq_len": [2048, 1536]}
    if "smaller-lora-rank" in order:
        assert order.index("shorter-sequences") < order.index("smaller-lora-rank")


# -- 000: 4x 44 GB, 512M model, micro 8 x seq 2048 asked for 51 GB ----------------------------

SEED_000_PROFILE = """\
description = "4x 44 GB, 512M GSA decoder pretraining with torchrun"

[gpu]
count = 4

[train]
micro_batch_size = 8
gradient_accumulation_steps = 8   # 8 x 8 x 4 = 256
max_seq_len = 2048
gradient_checkpointing = true
precision = "bf16"
k_base = 512

[launch]
nproc_per_node = 4

[env]
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"

[model]
arch = "decoder"
params = 5.12e8
layers = 8
ffn = 1536

[[ladder.rung]]
name = "smaller-k"
knob = "k_base"
op = "halve"
min = 64
semantic = true
"""

SEED_000_LOG = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/training/train.py", line 517, in <module>
[rank0]:     main()
[rank0]:   File "/workspace/gsa/attention.py", line 141, in forward
[rank0]:     scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 51.27 GiB. GPU 0 has a total capacity of 44.39 GiB of which 8.12 GiB is free. Including non-PyTorch memory, this process has 36.25 GiB memory in use. Of the allocated memory 35.10 GiB is allocated by PyTorch, and 650.00 MiB is reserved by PyTorch but unallocated.""" + OOM_TAIL + "\n"


def test_seed_000_cuts_the_micro_batch_keeping_256(tmp_path):
    status, out = run_fix(tmp_path, SEED_000_PROFILE, SEED_000_LOG)
    assert status == 0
    assert "expandable-segments" not in rungs(out)  # already set in [env]
    halve = get(out, "halve-micro-batch")
    old, new = halve["changes"]["micro_batch_size"]
    _accum_old, accum_new = halve["changes"]["gradient_accumulation_steps"]
    assert old == 8 and new <= 4
    assert new * accum_new * 4 == 256
    assert rungs(out)[0] == "halve-micro-batch"
    # The author's other change (seq 2048 -> 1024) and sparse-attention k are semantic: held back.
    assert {"shorter-sequences", "smaller-k"} <= set(rungs(out, "semantic_held_back"))


def test_seed_000_text_says_the_request_was_bigger_than_the_card(tmp_path):
    (tmp_path / "job.toml").write_text(SEED_000_PROFILE)
    (tmp_path / "oom.log").write_text(SEED_000_LOG)
    done = gpudoc_cli("fix", "--log", "oom.log", "-p", "job.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first == ("Rank 0 ran out of CUDA memory on GPU 0: it asked for 51.3 GiB with 8.1 GiB free of 44.4 GiB; "
                     "the single request is larger than the whole GPU.")
    assert "micro_batch_size" in done.stdout and "8 → " in done.stdout


# -- 002: contrastive encoder, Quadro RTX 6000 24 GB, Lightning -------------------------------

SEED_002_PROFILE = """\
description = "1x Quadro RTX 6000, contrastive LoRA encoder, fp16"

[gpu]
count = 1
name = "Quadro RTX 6000"

[train]
micro_batch_size = 45              # data_loader.batch_size
gradient_accumulation_steps = 5    # accumulate_grad_batches: effective 225
gradient_checkpointing = true
precision = "{precision}"
lora_rank = 16
n_positives = 32
n_negatives = 24

[[ladder.rung]]
name = "fewer-negatives"
knob = "n_negatives"
op = "halve"
min = 16
semantic = true
"""

SEED_002_LOG = """\
Epoch 0:  14%|█▍        | 61/437 [02:13<13:41,  0.46it/s, v_num=3, train_loss=2.310]
Traceback (most recent call last):
  File "/home/user/naics-embedder/src/naics_embedder/model/encoder.py", line 212, in forward
    sim = torch.einsum("bd,bnd->bn", anchor, negatives)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 22.51 GiB memory in use. Of the allocated memory 20.93 GiB is allocated by PyTorch, and 1.13 GiB is reserved by PyTorch but unallocated.""" + OOM_TAIL + "\n"


def test_seed_002_halves_batch_exactly_then_fewer_negatives(tmp_path):
    status, out = run_fix(tmp_path, SEED_002_PROFILE.format(precision="fp16"), SEED_002_LOG)
    assert status == 0
    halve = get(out, "halve-micro-batch")
    # The author went 45 -> 22 with accumulation 5 -> 10 (225 -> 220, a changed experiment);
    # 15 × 15 keeps 225 exact.
    assert halve["changes"] == {"micro_batch_size": [45, 15], "gradient_accumulation_steps": [5, 15]}
    assert "exact at 225" in halve["why"]
    assert "fewer-negatives" in rungs(out, "semantic_held_back")
    status, out = run_fix(tmp_path, SEED_002_PROFILE.format(precision="fp16"), SEED_002_LOG, "--allow-semantic")
    order = rungs(out)
    assert get(out, "fewer-negatives")["changes"] == {"n_negatives": [24, 16]}  # the guide's 24 -> 16
    assert order.index("halve-micro-batch") < order.index("fewer-negatives")


def test_seed_002_fp32_on_turing_gets_fp16_not_bf16(tmp_path):
    _status, out = run_fix(tmp_path, SEED_002_PROFILE.format(precision="fp32"), SEED_002_LOG)
    assert get(out, "mixed-precision")["changes"] == {"precision": ["fp32", "fp16"]}


# -- 004: Mamba on a 16 GB card ---------------------------------------------------------------

SEED_004_PROFILE = """\
description = "1x 16 GB, Mamba LM, fp16 + checkpointing"

[gpu]
count = 1

[train]
micro_batch_size = 4              # vram.batch_size
gradient_accumulation_steps = 4   # effective batch 16
max_seq_len = 1024
gradient_checkpointing = true
precision = "fp16"
"""

SEED_004_LOG = """\
step 120 | loss 5.8123 | lr 3.00e-04
Traceback (most recent call last):
  File "/content/mamba/train.py", line 301, in <module>
    loss.backward()
  File "/content/mamba/model.py", line 88, in selective_scan
    deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 15.57 GiB of which 2.44 MiB is free. Including non-PyTorch memory, this process has 15.56 GiB memory in use. Of the allocated memory 15.27 GiB is allocated by PyTorch, and 164.52 MiB is reserved by PyTorch but unallocated.""" + OOM_TAIL + "\n"


def test_seed_004_expandable_segments_then_batch_then_sequence(tmp_path):
    status, out = run_fix(tmp_path, SEED_004_PROFILE, SEED_004_LOG)
    assert status == 0
    order = rungs(out)
    assert order[:2] == ["expandable-segments", "halve-micro-batch"]
    # The guide's 4 -> 2 with accumulation 4 -> 8 (effective batch 16 kept).
    assert get(out, "halve-micro-batch")["changes"] == {
        "micro_batch_size": [4, 2], "gradient_accumulation_steps": [4, 8]}
    assert rungs(out, "semantic_held_back") == ["shorter-sequences"]
    status, out = run_fix(tmp_path, SEED_004_PROFILE, SEED_004_LOG, "--allow-semantic")
    assert get(out, "shorter-sequences")["changes"] == {"max_seq_len": [1024, 768]}
    assert rungs(out)[-1] == "shorter-sequences"
