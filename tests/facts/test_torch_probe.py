"""probe_torch and alloc_env_name against the real installed torch and a Python without torch."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gpudoc.facts.torch_probe import (
    alloc_env_name,
    alloc_env_name_for,
    installed_torch_version,
    parse_version,
    probe_torch,
)
from tests.conftest import REPO


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A virtual environment without torch (and without the system site-packages)."""
    venv = tmp_path_factory.mktemp("venv") / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return str(venv / "bin" / "python")


def test_real_torch_probe_reports_the_cpu_build():
    env = {"PATH": "/usr/bin:/bin", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    facts = probe_torch(sys.executable, env=env)
    assert facts.ok is True, facts.error
    assert facts.torch_version.startswith("2.13.0")
    assert facts.cuda_build is None and facts.hip_build is None  # CPU wheel
    assert facts.cuda_available is False
    assert facts.device_count == 0
    assert facts.alloc_env_name == "PYTORCH_ALLOC_CONF"
    assert facts.alloc_settings_effective == {"env": {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}}


def test_probe_does_not_import_torch_into_gpudoc():
    code = ("import sys; from gpudoc.facts.torch_probe import alloc_env_name; alloc_env_name(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_python_without_torch_is_a_clear_error(bare_python):
    facts = probe_torch(bare_python)
    assert facts.ok is False
    assert "cannot import torch" in facts.error and "No module named 'torch'" in facts.error
    assert facts.torch_version is None
    assert alloc_env_name(bare_python) == "PYTORCH_CUDA_ALLOC_CONF"
    assert installed_torch_version(bare_python) is None


def test_missing_interpreter_and_hanging_probe(tmp_path):
    assert probe_torch(str(tmp_path / "nope")).error.endswith("no such interpreter")
    hang = tmp_path / "python"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    started = time.monotonic()
    facts = probe_torch(str(hang), timeout=0.5)
    assert time.monotonic() - started < 10
    assert facts.ok is False and "did not finish" in facts.error


def test_garbage_output_is_an_error_with_the_last_line(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    fake.chmod(0o755)
    facts = probe_torch(str(fake))
    assert facts.ok is False
    assert "exit 1" in facts.error and "init_fs_encoding" in facts.error


def test_alloc_env_name_for_the_installed_torch_is_fast():
    started = time.perf_counter()
    name = alloc_env_name()
    elapsed = time.perf_counter() - started
    assert name == "PYTORCH_ALLOC_CONF"  # torch 2.13.0 is installed
    assert elapsed < 0.1
    assert alloc_env_name(sys.executable) == "PYTORCH_ALLOC_CONF"


@pytest.mark.parametrize("version, name", [
    ("2.8.0", "PYTORCH_CUDA_ALLOC_CONF"),
    ("2.8.1+cu128", "PYTORCH_CUDA_ALLOC_CONF"),
    ("1.13.1", "PYTORCH_CUDA_ALLOC_CONF"),
    ("2.9.0", "PYTORCH_ALLOC_CONF"),
    ("2.10.0+cu130", "PYTORCH_ALLOC_CONF"),  # 2.10 > 2.9 numerically, not as text
    ("2.13.0+cpu", "PYTORCH_ALLOC_CONF"),
    ("3.0.0", "PYTORCH_ALLOC_CONF"),
    (None, "PYTORCH_CUDA_ALLOC_CONF"),
])
def test_alloc_env_name_by_version(version, name):
    assert alloc_env_name_for(version) == name
    if version is not None:
        assert alloc_env_name(torch_version=version) == name


def test_parse_version():
    assert parse_version("2.13.0+cpu") == (2, 13)
    assert parse_version("nightly") is None


def _fake_torch(site_packages, version: str) -> None:
    """A dist-info as pip writes it: enough for importlib.metadata in that environment too."""
    info = site_packages / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")


def _asked_interpreter(python: str) -> str:
    code = "import importlib.metadata as m; print(m.version('torch'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _no_interpreter_may_start(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the layout should have answered without starting the interpreter")

    monkeypatch.setattr("subprocess.run", refuse)  # torch_probe imports subprocess where it uses it


def test_a_venvs_torch_is_read_from_its_layout_and_agrees_with_the_interpreter(tmp_path, monkeypatch):
    venv = tmp_path / "old-torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = next((venv / "lib").glob("python3*/site-packages"))
    _fake_torch(site, "2.8.0")
    asked = _asked_interpreter(python)
    _no_interpreter_may_start(monkeypatch)
    assert installed_torch_version(python) == "2.8.0" == asked
    assert alloc_env_name(python) == "PYTORCH_CUDA_ALLOC_CONF"  # torch < 2.9 reads the old name


def test_a_pyenv_shim_is_followed_by_pyenvs_own_lookup(tmp_path, monkeypatch):
    root = tmp_path / "pyenv"
    (root / "shims").mkdir(parents=True)
    shim = root / "shims" / "python3"
    shim.write_text("#!/usr/bin/env bash\nexec pyenv exec python3 \"$@\"\n")
    shim.chmod(0o755)
    # Two installs of this interpreter's minor version (their binaries are this one).
    lib = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for version, torch in (("3.11.7", "2.5.1"), ("3.11.9", "2.10.0")):
        bin_dir = root / "versions" / version / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python3").symlink_to(sys.executable)
        _fake_torch(root / "versions" / version / "lib" / lib / "site-packages", torch)
    _no_interpreter_may_start(monkeypatch)
    (root / "version").write_text("3.11.7\n")
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    assert installed_torch_version(str(shim)) == "2.5.1"
    project = tmp_path / "project" / "sub"
    project.mkdir(parents=True)
    (tmp_path / "project" / ".python-version").write_text("3.11.9\n")
    monkeypatch.chdir(project)
    assert installed_torch_version(str(shim)) == "2.10.0"
    monkeypatch.setenv("PYENV_VERSION", "3.11.7")
    assert installed_torch_version(str(shim)) == "2.5.1"


def test_an_unreadable_wrapper_script_is_asked_directly(tmp_path):
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    assert installed_torch_version(str(wrapper)) == _asked_interpreter(sys.executable)
