"""A rung no place of the job's takes is not proposed (``commands.writable``): `fix` skips it with the
binding's reason and goes on to the next, where it used to stop at it with the binding's refusal. A
Megatron-LM job whose distributed optimizer is ZeRO-1 has no flag for ZeRO-2; a profile that binds
Megatron's flags has none for optimizer offload."""

from __future__ import annotations

import json

import pytest

from tests.conftest import gpudoc_cli

# Megatron-LM's pretrain_gpt.py, as gpudoc recognises it (its own batch flags), out of memory at once.
JOB = """import sys
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
      "23.68 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 22.10 GiB memory in "
      "use. Of the allocated memory 21.20 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch "
      "but unallocated.", file=sys.stderr)
sys.exit(1)
"""
FLAGS = ["--num-layers", "8", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "512",
         "--micro-batch-size", "1", "--global-batch-size", "2", "--bf16", "--recompute-granularity", "full",
         "--recompute-method", "uniform", "--recompute-num-layers", "1"]
PROFILE = ('[train]\nmicro_batch_size = 1\nmax_seq_len = 512\nprecision = "bf16"\ngradient_checkpointing = true\n'
           'offload_optimizer = false\n[bind]\nargs = "megatron"\n')


@pytest.mark.parametrize(("profile", "extra", "rung", "why"), [
    (None, ["--use-distributed-optimizer"], "zero-stage",
     "megatron: --use-distributed-optimizer shards the optimizer's state (ZeRO-1); no flag shards its gradients"),
    (PROFILE, [], "offload-optimizer", "megatron: gpudoc writes no flag for offload_optimizer"),
], ids=["read-from-the-command", "a-profile-binding-its-flags"])
def test_a_rung_the_jobs_framework_cannot_take_is_skipped_with_its_reason(tmp_path, profile, extra, rung, why):
    (tmp_path / "pretrain_gpt.py").write_text(JOB)
    if profile is not None:
        (tmp_path / "gpudoc.toml").write_text(profile)
    done = gpudoc_cli("run", "--no-check", "--", "torchrun", "--nproc_per_node", "2", "pretrain_gpt.py", *FLAGS,
                      *extra, cwd=tmp_path)
    assert done.returncode != 0, done.stderr
    fixed = gpudoc_cli("fix", "--json", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    body = json.loads(fixed.stdout)
    skipped = {s["rung"]: s["reason"] for s in body["skipped"]}
    assert rung not in [s["rung"] for s in body["suggestions"]]
    assert skipped[rung].startswith("no place of the job's takes it:") and why in skipped[rung]
    # The next relaunch is planned from the rungs that remain.
    assert body["next"] is not None and rung not in body["next"]["rungs"]
