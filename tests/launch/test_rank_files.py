"""torchrun's hidden ranks get a file of their own; the ranks it shows keep their console."""

from __future__ import annotations

from pathlib import Path

from gpudoc.launch.rank_files import with_hidden_rank_logs

RUN = Path("/runs/r1/ranks")


def test_hidden_ranks_are_redirected_and_a_log_dir_added_before_the_script():
    argv = ["torchrun", "--nproc_per_node=4", "--local-ranks-filter", "0,2", "train.py", "--redirects", "x"]
    assert with_hidden_rank_logs(argv, RUN) == [
        "torchrun", "--nproc_per_node=4", "--local-ranks-filter", "0,2",
        "--redirects", "0:0,1:3,2:0,3:3", "--log-dir", str(RUN),
        "train.py", "--redirects", "x",  # the script's own arguments are left alone
    ]


def test_the_users_log_dir_and_shown_ranks_redirects_stay():
    argv = ["torchrun", "--nproc-per-node", "2", "--local_ranks_filter=0", "-r", "1", "--log_dir", "logs", "t.py"]
    out = with_hidden_rank_logs(argv, RUN)
    assert out == [*argv[:-1], "--redirects", "0:1,1:3", "t.py"]  # later wins in torchrun's parser
    assert "--log-dir" not in out


def test_nothing_changes_without_a_filter_or_when_hidden_ranks_already_write_files():
    plain = ["torchrun", "--nproc_per_node=2", "t.py"]
    assert with_hidden_rank_logs(plain, RUN) == plain
    teed = ["torchrun", "--nproc_per_node=2", "--local-ranks-filter", "0", "--tee", "3", "--log-dir", "d", "t.py"]
    assert with_hidden_rank_logs(teed, RUN) == teed
    assert with_hidden_rank_logs(["python", "t.py", "--local-ranks-filter", "0"], RUN) == \
        ["python", "t.py", "--local-ranks-filter", "0"]
    bad = ["torchrun", "--local-ranks-filter", "zero", "t.py"]  # torchrun refuses it itself
    assert with_hidden_rank_logs(bad, RUN) == bad


def test_an_unknown_local_world_size_covers_every_rank_torchrun_can_map():
    argv = ["python", "-m", "torch.distributed.run", "--nproc_per_node=gpu", "--local-ranks-filter", "0", "t.py"]
    out = with_hidden_rank_logs(argv, RUN)
    at = out.index("--redirects")
    assert out[at + 1] == "0:0," + ",".join(f"{rank}:3" for rank in range(1, 10))
    assert out[-1] == "t.py"
