"""Which interpreter runs the job (its torch decides the allocator variable's name)."""

from __future__ import annotations

import os
import sys

from gpudoc.job.interpreter import shebang_interpreter, target_python
from tests.conftest import call_beside_fifo


def _script(path, first_line):
    path.write_text(first_line + "\nprint('hi')\n")
    path.chmod(0o755)
    return path


def test_python_on_path(tmp_path):
    env = {"PATH": os.path.dirname(sys.executable)}
    name = os.path.basename(sys.executable)
    assert target_python([name, "train.py"], env) == os.path.join(os.path.dirname(sys.executable), name)


def test_launcher_script_shebangs(tmp_path):
    env = {"PATH": f"{tmp_path}:{os.path.dirname(sys.executable)}"}
    direct = _script(tmp_path / "torchrun", f"#!{sys.executable}")
    assert target_python(["torchrun", "--nproc_per_node=2", "t.py"], env) == sys.executable
    via_env = _script(tmp_path / "accelerate", f"#!/usr/bin/env {os.path.basename(sys.executable)}")
    assert shebang_interpreter(str(via_env), env) == os.path.join(os.path.dirname(sys.executable),
                                                                  os.path.basename(sys.executable))
    shell = _script(tmp_path / "run.sh", "#!/bin/sh")
    assert target_python([str(shell)], env) is None
    assert direct.exists()


def test_not_python_at_all():
    assert target_python(["definitely-not-here-xyz"], {"PATH": "/nonexistent"}) is None
    assert target_python([], {}) is None


def test_a_program_that_is_a_pipe_is_not_read(tmp_path):
    """`gpudoc run -- <(...)`: the program is a pipe; reading its #! line would wait for a writer, or
    take the bytes the job itself should get."""
    os.mkfifo(tmp_path / "run.sh")
    env = {"PATH": os.path.dirname(sys.executable)}
    assert call_beside_fifo(tmp_path / "run.sh", lambda: target_python([str(tmp_path / "run.sh")], env)) is None
    assert call_beside_fifo(tmp_path / "run.sh", lambda: shebang_interpreter(str(tmp_path / "run.sh"), env)) is None
