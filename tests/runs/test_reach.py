"""Whether the probe can reach a job, from its command line and from the text of a shell script it
runs: said once before the launch, nothing else changed."""

from __future__ import annotations

import pytest

from gpudoc.runs.reach import unreachable, wrapper_resets


@pytest.mark.parametrize(("argv", "said"), [
    (["python3", "-u", "-I", "train.py"], True), (["python", "-IB", "x.py"], True), (["python", "-E", "x.py"], True),
    (["python", "train.py", "-I"], False), (["python", "-c", "pass", "-I"], False), (["torchrun", "-I"], False),
    (["python", "--version"], False), (["python", "-m", "pkg", "-E"], False),
    # A wrapper that resets PYTHONPATH (or the whole environment) before Python starts.
    (["env", "-u", "PYTHONPATH", "python", "t.py"], True), (["env", "-i", "python", "t.py"], True),
    (["env", "PYTHONPATH=/x", "python", "t.py"], True), (["env", "-u", "HOME", "--unset=PYTHONPATH", "python"], True),
    (["env", "A=1", "python", "-I", "t.py"], True), (["env", "-u", "HOME", "python", "t.py"], False),
    (["env", "python", "t.py", "PYTHONPATH=/x", "-i"], False)])
def test_which_commands_the_probe_cannot_reach(argv, said):
    assert (unreachable(argv) is not None) == said


@pytest.mark.parametrize(("text", "line"), [
    ("#!/bin/bash\nset -e\nexport PYTHONPATH=/opt/src\npython train.py\n", 3),
    ("cd src\nPYTHONPATH= python train.py\n", 2),
    ("unset PYTHONPATH\ntorchrun train.py\n", 1),
    ("exec env -i PATH=/usr/bin python train.py\n", 1),
    ("python3 -u -I train.py\n", 1),
    ("# export PYTHONPATH=/x (a comment)\npython -E train.py\n", 2),
])
def test_a_script_that_drops_pythonpath_is_named_with_its_line(tmp_path, text, line):
    (tmp_path / "run.sh").write_text(text)
    said = wrapper_resets(["bash", "-e", "run.sh", "--lr", "1"], tmp_path)
    assert said is not None and said.startswith(f"run.sh, line {line} (")
    assert said.endswith("resets PYTHONPATH or starts Python ignoring it: the probe may not observe this job "
                         "(nothing else changes)")


@pytest.mark.parametrize("text", [
    "export PYTHONPATH=src:$PYTHONPATH\npython train.py\n",
    'export PYTHONPATH="${PYTHONPATH}:/opt/src"\nMYPYTHONPATH=/x python -m pkg -E\n',
    "env -u HOME python train.py --lr 1e-4 -I\n",
    "echo $PYTHONPATH\n",
])
def test_a_script_that_keeps_pythonpath_is_not_suspected(tmp_path, text):
    (tmp_path / "run.sh").write_text(text)
    assert wrapper_resets(["sh", "run.sh"], tmp_path) is None


def test_which_commands_run_a_script_that_is_read(tmp_path):
    (tmp_path / "run.sh").write_text("export PYTHONPATH=/x\n")
    (tmp_path / "launch").write_text("#!/usr/bin/env bash\nexport PYTHONPATH=/x\n")
    (tmp_path / "train.py").write_text("export PYTHONPATH=/x\n")  # not a shell script
    for argv in (["./run.sh"], ["run.sh"], ["./launch", "--x"], ["env", "A=1", "bash", "run.sh"],
                 ["bash", "-o", "pipefail", "run.sh"], ["bash", "-c", "export PYTHONPATH=/x; python t.py"]):
        assert wrapper_resets(argv, tmp_path) is not None, argv
    for argv in (["python", "train.py"], ["./train.py"], ["bash", "missing.sh"], ["bash"], ["bash", "-c"], []):
        assert wrapper_resets(argv, tmp_path) is None, argv


def test_a_script_that_is_a_fifo_is_not_read(tmp_path):
    import os

    from tests.conftest import call_beside_fifo

    os.mkfifo(tmp_path / "run.sh")  # `bash <(...)`: its bytes are the shell's, and no writer is there
    assert call_beside_fifo(tmp_path / "run.sh", lambda: wrapper_resets(["bash", "run.sh"], tmp_path)) is None
