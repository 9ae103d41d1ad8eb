"""Values that would silently mean "everything" or "nothing" are refused with one line and exit 2."""

from __future__ import annotations

import pytest

from gpudoc.checks._common import MAX_GPU_INDEX, parse_gpu_list
from gpudoc.errors import UsageError
from tests.conftest import NVIDIA_SMI, gpudoc_cli

T4 = str(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml")


@pytest.mark.parametrize(("args", "code", "message"), [
    (["check", "--snapshot", T4, "--gpus", ""], 2, "--gpus: empty"),
    (["check", "--snapshot", T4, "--gpus", "0-30000000"], 2, f"goes past GPU {MAX_GPU_INDEX}"),
    (["check", "--snapshot", T4, "--gpus", "99999999999"], 2, f"is past GPU {MAX_GPU_INDEX}"),
    (["check", "-p", "", "--snapshot", T4], 2, "-p: an empty profile name"),
    (["run", "--tmux", "", "--", "true"], 125, "is not a usable tmux session name"),
    (["profile", "new", "box\nevil"], 2, "must be a plain name"),
    (["profile", "new", "../up"], 2, "must be a plain name"),
])
def test_empty_or_absurd_values_are_one_line_errors(isolated_home, args, code, message):
    done = gpudoc_cli(*args, cwd=isolated_home)
    assert done.returncode == code, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr and len(done.stderr) < 400
    assert not (isolated_home / ".gpudoc" / "profiles").exists()


def test_a_huge_range_is_refused_before_it_is_built():
    with pytest.raises(UsageError):
        parse_gpu_list(f"0-{10**12}")
    assert parse_gpu_list(f"{MAX_GPU_INDEX - 1}-{MAX_GPU_INDEX}") == (MAX_GPU_INDEX - 1, MAX_GPU_INDEX)
