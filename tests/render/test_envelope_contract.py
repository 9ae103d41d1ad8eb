"""Every ``--json`` output is one envelope: the shared keys with their types, the exit code that
the process really exits with, then the command's own keys; errors too, once ``--json`` was asked."""

from __future__ import annotations

import json
import sys

import pytest

from gpudoc import __version__
from tests.conftest import NVIDIA_SMI, gpudoc_cli

T4 = str(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml")
PROFILE = """
[train]
micro_batch_size = 2
max_seq_len = 512
precision = "bf16"

[model]
layers = 4
hidden = 256
heads = 4
ffn = 1024
vocab = 1000
"""
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
       "of 23.65 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 22.51 GiB memory "
       "in use. Of the allocated memory 21.10 GiB is allocated by PyTorch, and 948.00 MiB is reserved by "
       "PyTorch but unallocated.\n")
STATUSES = {"ok", "warn", "fail", "error", "failed", "interrupted"}


def assert_envelope(doc: dict, command: str, exit_code: int) -> None:
    assert list(doc)[:5] == ["schema_version", "gpudoc_version", "command", "status", "exit_code"]
    assert doc["schema_version"] == 1 and doc["gpudoc_version"] == __version__
    assert doc["command"] == command
    assert doc["status"] in STATUSES
    assert doc["exit_code"] == exit_code and isinstance(doc["exit_code"], int)


@pytest.mark.parametrize(("args", "command", "own_keys"), [
    (["check", "--snapshot", T4, "--json"], "check", {"facts", "findings", "summary"}),
    (["check", "--list-checks", "--json"], "check", {"checks"}),
    (["estimate", "--gpu-memory", "24", "--json"], "estimate", {"peak_bytes", "breakdown", "max_micro_batch_size"}),
    (["runs", "--json"], "runs", {"runs", "runs_dir"}),
    (["runs", "--all", "--json"], "runs", {"runs", "projects"}),
    (["profile", "list", "--json"], "profile list", {"profiles"}),
    (["profile", "show", "gpu-24gb", "--json"], "profile show", {"profile"}),
    (["run", "--dry-run", "--json", "--", "python", "train.py"], "run", {"argv", "env_set", "file_edits"}),
    (["fix", "--log", "oom.log", "--json"], "fix", {"diagnosis", "suggestions"}),
    (["clean", "--dry-run", "--json"], "clean", {"targets", "others"}),
])
def test_every_json_output_is_the_envelope(isolated_home, args, command, own_keys):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "oom.log").write_text(OOM)
    done = gpudoc_cli(*args, cwd=isolated_home)
    doc = json.loads(done.stdout)
    assert_envelope(doc, command, done.returncode)
    assert own_keys <= set(doc)


def test_the_run_record_at_the_end_of_a_run_is_the_envelope_on_stderr(isolated_home):
    done = gpudoc_cli("run", "--no-check", "--json", "--", sys.executable, "-c", "raise SystemExit(3)",
                      cwd=isolated_home)
    assert done.returncode == 3 and done.stdout == ""
    doc = json.loads(done.stderr)
    assert_envelope(doc, "run", 3)
    assert doc["status"] == "failed" and doc["run"]["exit_code"] == 3


@pytest.mark.parametrize(("args", "command", "exit_code", "file", "key"), [
    (["check", "-p", "missing-profile", "--json"], "check", 2, None, None),
    (["fix", "--log", "nope.log", "--json"], "fix", 2, "nope.log", None),
    (["check", "--snapshot", "nope.xml", "--json"], "check", 2, "nope.xml", None),
    (["run", "-p", "bindmissing.toml", "--json", "--", "true"], "run", 125, "absent.json", None),
    (["profile", "show", "bad.toml", "--json"], "profile show", 2, "bad.toml", "gpu.cuont"),
    (["runs", "show", "no-such-run", "--json"], "runs show", 2, None, None),
    (["runs", "diff", "no-such-run", "other", "--json"], "runs diff", 2, None, None),
    (["runs", "prune", "--json"], "runs prune", 2, None, None),
    (["runs", "--last", "0", "--json"], "runs", 2, None, None),
    (["estimate", "--gpu-memory", "-1", "--json"], "estimate", 2, None, None),
    (["run", "--no-check", "--json", "--", "no-such-program-anywhere"], "run", 127, None, None),
    (["run", "-p", "bad.toml", "--json", "--", "true"], "run", 125, "bad.toml", "gpu.cuont"),
    (["check", "-p", "badbind.toml", "--json"], "check", 2, "badbind.toml", 'bind.files."c.json".micro_bach_size'),
])
def test_errors_are_the_envelope_once_json_was_asked(isolated_home, args, command, exit_code, file, key):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "bad.toml").write_text("[gpu]\ncuont = 2\n")
    (isolated_home / "bindmissing.toml").write_text('[train]\nmicro_batch_size = 2\n'
                                                    '[bind.files."absent.json"]\nmicro_batch_size = "bs"\n')
    (isolated_home / "badbind.toml").write_text('[train]\nmicro_batch_size = 2\n[bind.files."c.json"]\nmicro_bach_size = "bs"\n')
    done = gpudoc_cli(*args, cwd=isolated_home)
    assert done.returncode == exit_code
    doc = json.loads(done.stdout)
    assert_envelope(doc, command, exit_code)
    assert doc["status"] == "error"
    error = doc["error"]
    assert set(error) == {"message", "file", "key"}
    assert error["message"] and error["message"].splitlines()[0] in done.stderr
    if file is not None:
        assert error["file"].endswith(file) and error["key"] == key


def test_the_jobs_own_json_flag_is_not_ours(isolated_home):
    done = gpudoc_cli("run", "--no-check", "--", "no-such-program-anywhere", "--json", cwd=isolated_home)
    assert done.returncode == 127 and done.stdout == ""
