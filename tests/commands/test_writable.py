"""A rung no place of the job's takes is not proposed (``commands.writable``): a Megatron-LM job reads
no checkpointing gpudoc can write, so `fix` skips that rung with the binding's reason and goes on to the
next, where it used to stop at it with the binding's refusal."""

from __future__ import annotations

import json
import sys

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
         "--micro-batch-size", "1", "--global-batch-size", "1", "--bf16"]


@pytest.mark.parametrize("profile", [None, '[train]\nmicro_batch_size = 1\nmax_seq_len = 512\nprecision = "bf16"\n'
                                     'gradient_checkpointing = false\n[bind]\nargs = "megatron"\n'],
                         ids=["read-from-the-command", "a-profile-binding-its-flags"])
def test_a_rung_the_jobs_framework_cannot_take_is_skipped_with_its_reason(tmp_path, profile):
    (tmp_path / "pretrain_gpt.py").write_text(JOB)
    if profile is not None:
        (tmp_path / "gpudoc.toml").write_text(profile)
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "pretrain_gpt.py", *FLAGS, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    fixed = gpudoc_cli("fix", "--json", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    body = json.loads(fixed.stdout)
    proposed = [s["rung"] for s in body["suggestions"]]
    skipped = {s["rung"]: s["reason"] for s in body["skipped"]}
    assert "gradient-checkpointing" not in proposed
    assert skipped["gradient-checkpointing"].startswith("no place of the job's takes it:")
    assert "megatron: gpudoc writes no flag for gradient_checkpointing" in skipped["gradient-checkpointing"]
    # The next relaunch is planned from the rungs that remain.
    assert body["next"]["rungs"] == ["expandable-segments"]
