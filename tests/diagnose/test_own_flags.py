"""A rank's parser refusing a flag gpudoc added says that gpudoc added it: unit, and under real torchrun."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.diagnose.own_flags import refused_flags, refused_own_flags, user_command
from tests.launch.helpers import Gpudoc, assert_no_leftovers, job_env, last_record, marker

REFUSED = Diagnosis(cause="error", rank=1, evidence="train.py: error: unrecognized arguments: --per_device_train_batch_size 8",
                    summary="Rank 1 refused its command line (train.py exits with status 2): unrecognized arguments: "
                            "--per_device_train_batch_size 8.")


def test_the_refused_flags_are_read_from_either_of_argparses_wordings():
    assert refused_flags("t.py: error: unrecognized arguments: --a=1 --b 2 x") == ["--a", "--b"]
    assert refused_flags("t.py: error: argument --lr/-l: invalid float value: 'x'") == ["--lr"]
    assert refused_flags("RuntimeError: boom") == []


def test_only_flags_gpudoc_added_are_named_as_its_own():
    typed = ["torchrun", "--nproc_per_node=2", "train.py", "--lr", "1"]
    own = refused_own_flags(REFUSED, typed, [*typed, "--per_device_train_batch_size", "8"])
    assert own is not None
    assert own.summary.endswith("; --per_device_train_batch_size was added by gpudoc, not typed: the script's parser "
                                "does not declare it, so bind that knob another way ([bind.files] for its config, "
                                "or a flag it reads).")
    # The user typed it: the script's own business, said as it was.
    typed_it = [*typed, "--per_device_train_batch_size", "2"]
    assert refused_own_flags(REFUSED, typed_it, [*typed, "--per_device_train_batch_size", "8"]) == REFUSED
    assert refused_own_flags(None, typed, typed) is None


@dataclass
class _Rec:
    id: str
    command: list[str]
    parent: str | None = None


class _Store:
    def __init__(self, *records: _Rec) -> None:
        self.records = {r.id: r for r in records}

    def record_or_none(self, run_id: str) -> _Rec | None:
        return self.records.get(run_id)


def test_a_relaunchs_own_command_carries_the_rungs_flags_so_the_chains_first_run_is_what_was_typed():
    first = _Rec("a", ["python", "t.py"])
    second = _Rec("b", ["python", "t.py", "--per_device_train_batch_size", "4"], parent="a")
    third = _Rec("c", ["python", "t.py", "--per_device_train_batch_size", "2"], parent="b")
    assert user_command(third, _Store(first, second, third)) == ["python", "t.py"]
    assert user_command(third, _Store(second, third)) == second.command  # the chain's start was pruned


JOB = """\
import argparse, os
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
if rank == 1:
    parser.parse_args()
parser.parse_known_args()
dist.barrier()
"""


@pytest.mark.slow
def test_gpudoc_run_under_torchrun_names_the_rank_and_its_own_flag(isolated_home):
    (isolated_home / "gpudoc.toml").write_text('[train]\nmicro_batch_size = 8\n[bind]\nargs = "hf-trainer"\n')
    (isolated_home / "train.py").write_text(JOB)
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "torchrun", "--nproc_per_node=2", "--monitor-interval=0.1",
               "train.py", "--lr", "1", mark, cwd=isolated_home, env=job_env())
    assert g.wait(120) != 0
    record = last_record(isolated_home)
    d = record["diagnosis"]
    assert (record["cause"], d["rank"]) == ("error", 1)
    assert "refused its command line" in d["summary"] and "SIGTERM" not in d["summary"].split(";")[0]
    assert "--per_device_train_batch_size was added by gpudoc, not typed" in d["summary"]
    assert "--per_device_train_batch_size was added by gpudoc" in bytes(g.err).decode()
    assert_no_leftovers(mark)
