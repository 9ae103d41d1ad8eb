"""The driver and NVML are there; the installed torch's CUDA build can run on this driver."""

from __future__ import annotations

import re

from gpudoc.checks._common import CheckContext
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile

NVML = "driver.nvml"
TORCH_CUDA = "driver.torch-cuda"

# CUDA wheels the PyTorch index publishes (newest last); the remedy picks the newest one the
# driver can run.
_WHEEL_TAGS = ("11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0")


def check_nvml(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    if facts.nvml_error:
        in_container = bool(facts.host and facts.host.in_container)
        remedy = (
            "start the container with GPUs: `docker run --gpus all ...` (or `apptainer exec --nv ...`)"
            if in_container
            else "install the NVIDIA driver (`sudo ubuntu-drivers install` on Ubuntu), then `nvidia-smi` must list the GPUs"
        )
        return Finding(
            NVML,
            Severity.FAIL,
            "no NVIDIA driver: NVML could not start",
            f"{facts.nvml_error}. Without a driver the job cannot train on a GPU.",
            remedy,
            ("driver",),
        )
    if not facts.gpus:
        return Finding(
            NVML,
            Severity.FAIL,
            "the driver reports no GPU",
            f"source: {facts.source}",
            "`nvidia-smi -L` must list a GPU; check `lspci | grep -i nvidia` and the container's `--gpus`",
            ("driver",),
        )
    parts = [f"driver {facts.driver_version or 'N/A'}"]
    if facts.cuda_driver_version:
        parts.append(f"CUDA {facts.cuda_driver_version}")
    n = len(facts.gpus)
    title = f"{', '.join(parts)}, {n} GPU{'s' if n != 1 else ''}"
    detail = f"source: {facts.source}"
    if facts.nvml_version:
        detail += f"; NVML {facts.nvml_version}"
    return Finding(NVML, Severity.OK, title, detail)


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    match = re.match(r"(\d+)(?:\.(\d+))?", str(text))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0))


def _wheel_for(driver_cuda: tuple[int, ...]) -> str | None:
    fitting = [t for t in _WHEEL_TAGS if (_version(t) or (0,)) <= driver_cuda]
    return fitting[-1] if fitting else None


def _pip_remedy(driver_cuda: tuple[int, ...] | None) -> str:
    tag = _wheel_for(driver_cuda) if driver_cuda else None
    if tag is None:
        return "upgrade the NVIDIA driver (`sudo ubuntu-drivers install`), then `nvidia-smi` shows its CUDA version"
    return f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu{tag.replace('.', '')}"


def check_torch_cuda(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    torch = facts.torch
    if torch is None:
        return Finding(
            TORCH_CUDA,
            Severity.SKIP,
            "torch's CUDA build not probed",
            "the probe starts the job's Python and imports torch (seconds), so it runs only with --deep",
            "gpudoc check --deep",
        )
    if not torch.ok:
        return Finding(
            TORCH_CUDA,
            Severity.FAIL,
            f"torch cannot be imported by {torch.python}",
            torch.error or "",
            f"{torch.python} -m pip install torch",
            ("torch",),
        )
    driver_cuda = _version(facts.cuda_driver_version)
    label = f"torch {torch.torch_version}"
    if torch.hip_build:
        return Finding(TORCH_CUDA, Severity.INFO, f"{label} is a ROCm build (HIP {torch.hip_build})",
                       "NVIDIA checks do not apply to it", "pip install torch --index-url https://download.pytorch.org/whl/cu124",
                       ("torch",))
    if not torch.cuda_build:
        severity = Severity.FAIL if facts.gpus else Severity.WARN
        return Finding(
            TORCH_CUDA,
            severity,
            f"{label} is a CPU-only build: it cannot use the GPU",
            f"interpreter: {torch.python}",
            # No driver to match: the current default CUDA wheel (a driver >= 570 runs it).
            _pip_remedy(driver_cuda or (12, 8)),
            ("torch",),
        )
    build = _version(torch.cuda_build)
    title = f"{label} built for CUDA {torch.cuda_build}"
    if driver_cuda and build:
        if build[0] > driver_cuda[0]:
            return Finding(
                TORCH_CUDA,
                Severity.FAIL,
                f"{title}; the driver supports CUDA {facts.cuda_driver_version} only",
                "a CUDA major version newer than the driver's cannot run: torch.cuda.is_available() is False",
                _pip_remedy(driver_cuda),
                ("torch", "driver"),
            )
        if build > driver_cuda:
            return Finding(
                TORCH_CUDA,
                Severity.WARN,
                f"{title}; the driver supports CUDA {facts.cuda_driver_version}",
                "same major version: CUDA minor-version compatibility runs it, but kernels that need "
                "PTX JIT for a newer minor version fail",
                _pip_remedy(driver_cuda),
                ("torch", "driver"),
            )
    if facts.gpus and torch.cuda_available is False:
        return Finding(
            TORCH_CUDA,
            Severity.FAIL,
            f"{title}, but torch.cuda.is_available() is False",
            "the driver and the build match; the GPUs are hidden (CUDA_VISIBLE_DEVICES) or the device files are missing",
            f"{torch.python} -c \"import torch; torch.cuda.init()\"  # prints the real CUDA error",
            ("torch",),
        )
    detail = f"driver supports CUDA {facts.cuda_driver_version or 'N/A'}"
    if torch.device_count is not None:
        detail += f"; torch sees {torch.device_count} device(s)"
    return Finding(TORCH_CUDA, Severity.OK, title, detail)
