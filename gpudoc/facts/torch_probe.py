"""What the training interpreter's torch says about itself, asked in a subprocess.

gpudoc never imports torch (it costs seconds and may initialise CUDA); ``probe_torch`` runs a small
script in the *target* interpreter instead. ``alloc_env_name`` answers the cheaper question
"which allocator variable does the installed torch read" from package metadata alone.

torch 2.9 moved the caching allocator's settings to the device-agnostic ``PYTORCH_ALLOC_CONF``;
``PYTORCH_CUDA_ALLOC_CONF`` still works there but logs "PYTORCH_CUDA_ALLOC_CONF is deprecated, use
PYTORCH_ALLOC_CONF instead". Older releases read only ``PYTORCH_CUDA_ALLOC_CONF``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gpudoc import allocator
from gpudoc.facts.model import TorchFacts
from gpudoc.job.installed import installed_version, parse_version

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


def alloc_env_name_for(torch_version: str | None) -> str:
    return allocator.name_for(parse_version(torch_version))


def installed_torch_version(python: str | None = None) -> str | None:
    """The torch version installed for ``python`` (default: this interpreter), without importing it
    (``gpudoc.job.installed``: from its environment's layout, so ``gpudoc check`` need not start it)."""
    return installed_version("torch", python)


def alloc_env_name(python: str | None = None, torch_version: str | None = None) -> str:
    """The allocator variable the target's torch reads: ``PYTORCH_ALLOC_CONF`` for torch >= 2.9,
    else ``PYTORCH_CUDA_ALLOC_CONF`` (also the answer when torch is not installed)."""
    if torch_version is None:
        torch_version = installed_torch_version(python)
    return alloc_env_name_for(torch_version)


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
