"""nanoGPT: train.py's own defaults (the globals it sets before its configurator runs) are the job's
where no config file or ``--key=value`` says otherwise, its accumulation divided over every rank of
every node, and a change goes on the command line, never into train.py."""

from __future__ import annotations

import shutil

from gpudoc.job.knobs import read_job
from tests.conftest import CONFIGS
from tests.frameworks.test_reading import _plan

STANDIN = CONFIGS.parent / "standins" / "nanogpt_train.py"  # train.py's defaults: 12, 5 * 8, 1024
# nanoGPT's README, two nodes of 8 GPUs, on train.py's defaults alone.
MULTINODE = ["torchrun", "--nproc_per_node=8", "--nnodes=2", "--node_rank=0", "--master_addr=123.456.123.456",
             "--master_port=1234", "train.py"]


def test_a_command_with_no_config_runs_train_pys_own_defaults_over_all_its_ranks(tmp_path):
    shutil.copy(STANDIN, tmp_path / "train.py")
    reading = read_job(MULTINODE, tmp_path)
    assert reading.framework == "nanogpt"
    # 5 * 8 = 40 divided by 8 x 2 ranks.
    assert reading.values == {"micro_batch_size": 12, "gradient_accumulation_steps": 2, "max_seq_len": 1024}
    assert set(reading.places.values()) == {"default:nanogpt"}
    before = (tmp_path / "train.py").read_text()
    plan = _plan(MULTINODE, tmp_path, micro_batch_size=6, gradient_accumulation_steps=4)
    assert plan.file_edits == [] and (tmp_path / "train.py").read_text() == before
    assert plan.argv[:len(MULTINODE)] == MULTINODE
    assert sorted(plan.argv[len(MULTINODE):]) == ["--batch_size=6", "--gradient_accumulation_steps=64"]


def test_a_config_that_leaves_a_key_out_keeps_train_pys_default(tmp_path):
    shutil.copy(STANDIN, tmp_path / "train.py")
    (tmp_path / "config").mkdir()
    shutil.copy(CONFIGS / "nanoGPT__config__finetune_shakespeare.py", tmp_path / "config" / "finetune_shakespeare.py")
    reading = read_job(["python", "train.py", "config/finetune_shakespeare.py"], tmp_path)
    # The config sets batch 1 and accumulation 32, no block_size: train.py's 1024.
    assert reading.values == {"micro_batch_size": 1, "gradient_accumulation_steps": 32, "max_seq_len": 1024}
    assert reading.places["max_seq_len"] == "default:nanogpt"
    assert reading.places["micro_batch_size"] == "file:config/finetune_shakespeare.py:batch_size"
