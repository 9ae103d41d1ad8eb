"""What the training interpreter's torch says about itself, asked in a subprocess.

gpudoc never imports torch (it costs seconds and may initialise CUDA); ``probe_torch`` runs a small
script in the *target* interpreter instead. ``alloc_env_name`` answers the cheaper question
"which allocator variable does the installed torch read" from package metadata alone.

torch 2.9 moved the caching allocator's settings to the device-agnostic ``PYTORCH_ALLOC_CONF``;
``PYTORCH_CUDA_ALLOC_CONF`` still works there but logs "PYTORCH_CUDA_ALLOC_CONF is deprecated, use
PYTORCH_ALLOC_CONF instead". Older releases read only ``PYTORCH_CUDA_ALLOC_CONF``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable
from typing import Any

from gpudoc import allocator
from gpudoc.facts.model import TorchFacts

PROBE_TIMEOUT_S = 30.0

# Runs in the target interpreter; prints one JSON object on the last line of stdout.
_PROBE = r"""
import json, os, sys
out = {"python_version": sys.version.split()[0], "executable": sys.executable}
try:
    import importlib.metadata as md
    out["dist_version"] = md.version("torch")
except Exception:
    out["dist_version"] = None
try:
    import torch
except BaseException as exc:
    out["error"] = "cannot import torch: %s: %s" % (type(exc).__name__, exc)
    print(json.dumps(out))
    sys.exit(0)
out["torch_version"] = str(torch.__version__)
out["cuda_build"] = getattr(torch.version, "cuda", None)
out["hip_build"] = getattr(torch.version, "hip", None)
try:
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = int(torch.cuda.device_count())
except Exception as exc:
    out["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
settings = {}
if out.get("cuda_available"):
    try:
        settings["backend"] = torch.cuda.get_allocator_backend()
    except Exception as exc:
        settings["backend_error"] = str(exc)
for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
    if os.environ.get(name) is not None:
        settings.setdefault("env", {})[name] = os.environ[name]
out["alloc_settings"] = settings
print(json.dumps(out))
"""


def parse_version(text: str | None) -> tuple[int, int] | None:
    """``"2.13.0+cpu"`` -> (2, 13); None for text that is not a version."""
    if not text:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def alloc_env_name_for(torch_version: str | None) -> str:
    return allocator.name_for(parse_version(torch_version))


def installed_torch_version(python: str | None = None) -> str | None:
    """The torch version installed for ``python`` (default: this interpreter), without importing it.

    The ``torch-X.dist-info`` directory names it. For this interpreter its sys.path is listed; for
    another one its environment's site-packages are found from the file layout (venv, conda,
    Debian, pyenv), so ``gpudoc check`` need not start the job's Python. Only a layout that cannot
    be read this way costs a subprocess, which reads the metadata there; still no torch import.
    """
    if python is None or _same_interpreter(python):
        return _dist_info_version(sys.path)
    site_dirs = _site_dirs_of(python)
    if site_dirs is not None:
        return _dist_info_version(site_dirs)
    code = ("import importlib.metadata as m\ntry:\n print(m.version('torch'))\nexcept Exception:\n print('')")
    import subprocess  # here: `gpudoc check` usually answers from the layout, without it (~5 ms)

    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text or None


def _dist_info_version(directories: Iterable[str]) -> str | None:
    for entry in directories:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("torch-") and name.endswith((".dist-info", ".egg-info")):
                return name[len("torch-"):].rsplit(".", 1)[0]
    return None


def _site_dirs_of(python: str) -> list[str] | None:
    """Where ``python`` looks for packages, from the file layout alone; None when it cannot tell
    (then the caller asks the interpreter itself)."""
    path = shutil.which(python) or python
    path = _through_pyenv_shim(path) or path
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != b"\x7fELF":
                return None  # a wrapper script: only running it says what it starts
    except OSError:
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    real_name = os.path.basename(os.path.realpath(path))
    version = re.fullmatch(r"python(\d+\.\d+)", real_name)
    lib = f"python{version.group(1)}" if version else "python3*"
    dirs = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d]
    pyvenv = os.path.join(root, "pyvenv.cfg")
    if os.path.isfile(pyvenv):
        dirs += glob.glob(os.path.join(root, "lib", lib, "site-packages"))
        config = _read_pyvenv_cfg(pyvenv)
        if config.get("include-system-site-packages", "false").lower() != "true":
            return dirs
        root = os.path.dirname(config.get("home", "").rstrip("/")) or root
    dirs += glob.glob(os.path.join(root, "lib", lib, "site-packages"))
    dirs += glob.glob(os.path.join(root, "local", "lib", lib, "dist-packages"))  # Debian's pip
    dirs += glob.glob(os.path.join(root, "lib", "python3", "dist-packages"))  # Debian's packages
    dirs += glob.glob(os.path.join(os.path.expanduser("~"), ".local", "lib", lib, "site-packages"))
    return dirs


def _read_pyvenv_cfg(path: str) -> dict[str, str]:
    config = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep:
                    config[key.strip()] = value.strip()
    except OSError:
        pass
    return config


def _through_pyenv_shim(path: str) -> str | None:
    """The interpreter a pyenv shim would start, by pyenv's documented lookup order
    (PYENV_VERSION, then .python-version up from the working directory, then the global version
    file); None when ``path`` is not a pyenv shim or the version cannot be read."""
    shims = os.path.dirname(os.path.abspath(path))
    if os.path.basename(shims) != "shims" or not os.path.isdir(os.path.join(os.path.dirname(shims), "versions")):
        return None
    pyenv_root = os.path.dirname(shims)
    version = os.environ.get("PYENV_VERSION", "").split(":")[0]
    if not version:
        directory = os.getcwd()
        while True:
            candidate = os.path.join(directory, ".python-version")
            if os.path.isfile(candidate):
                version = _first_word(candidate)
                break
            parent = os.path.dirname(directory)
            if parent == directory:
                version = _first_word(os.path.join(pyenv_root, "version"))
                break
            directory = parent
    if not version or version == "system":
        return None
    target = os.path.join(pyenv_root, "versions", version, "bin", os.path.basename(path))
    return target if os.path.isfile(target) else None


def _first_word(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("#"):
                    return line.split()[0]
    except OSError:
        pass
    return ""


def alloc_env_name(python: str | None = None, torch_version: str | None = None) -> str:
    """The allocator variable the target's torch reads: ``PYTORCH_ALLOC_CONF`` for torch >= 2.9,
    else ``PYTORCH_CUDA_ALLOC_CONF`` (also the answer when torch is not installed)."""
    if torch_version is None:
        torch_version = installed_torch_version(python)
    return alloc_env_name_for(torch_version)


def _same_interpreter(python: str) -> bool:
    # Not realpath: a virtual environment's python is a symlink to the base interpreter but has
    # its own site-packages.
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def probe_torch(python: str | None = None, *, timeout: float = PROBE_TIMEOUT_S,
                env: dict[str, str] | None = None) -> TorchFacts:
    """Run the probe in ``python`` (default: this interpreter). Never raises."""
    import subprocess  # only `check --deep` probes

    python = python or sys.executable
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return TorchFacts(python=python, ok=False, error=f"{python}: no such interpreter")
    except PermissionError:
        return TorchFacts(python=python, ok=False, error=f"{python}: not executable")
    except subprocess.TimeoutExpired:
        return TorchFacts(python=python, ok=False,
                          error=f"{python}: torch probe did not finish in {timeout:.0f} s (import torch hangs?)")
    except OSError as exc:
        return TorchFacts(python=python, ok=False, error=f"{python}: {exc}")

    data = _last_json_line(done.stdout)
    if data is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return TorchFacts(python=python, ok=False,
                          error=f"{python}: torch probe failed (exit {done.returncode}): {tail[0]}")
    if data.get("error"):
        return TorchFacts(python=python, ok=False, error=data["error"],
                          alloc_env_name=alloc_env_name_for(data.get("dist_version")))
    version = data.get("torch_version")
    return TorchFacts(
        python=python,
        ok=True,
        error=data.get("cuda_error"),
        torch_version=version,
        cuda_build=data.get("cuda_build"),
        hip_build=data.get("hip_build"),
        cuda_available=data.get("cuda_available"),
        device_count=data.get("device_count"),
        alloc_env_name=alloc_env_name_for(version),
        alloc_settings_effective=data.get("alloc_settings") or None,
    )


def _last_json_line(stdout: str) -> dict[str, Any] | None:
    # Site customisations may print before us; the probe's answer is the last JSON line.
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None
