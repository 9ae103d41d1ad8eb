"""Here, before the GPU comes: gpudoc's own wheel (nothing can fetch a build backend there), the wheels
of what gpudoc needs and the lent machine lacks (Python 3.12, manylinux x86-64), into ``.gpukit/``
(ignored by git, carried by the device call), then the exact device call to make.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import tomllib
from runner import REPO

WHEELS = REPO / ".gpukit"
# What the lent machine's image already holds of gpudoc's needs and theirs (the GPU kit issue and the
# device's package list): carried again, a second copy would shadow the machine's own in the jobs too,
# since gpudoc's directory is on their PYTHONPATH.
DEVICE_HAS = frozenset({"psutil", "nvidia-ml-py", "typing-extensions"})
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
DEVICE_CALL_TIMEOUT_S = 330  # the plan's 270 s, the install and a margin; a rerun still fits the session
CARRY_LIMIT = 64 * 2**20  # the device call's whole working tree


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path = REPO / "pyproject.toml", python: str = "3.12") -> list[str]:
    """gpudoc's runtime requirements that apply on ``python`` and the machine lacks, each pinned to
    the version this checkout's tests ran with when it is installed here (else its range)."""
    wanted = []
    for spec in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        requirement, _, marker = spec.partition(";")
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement.strip()).group(0)  # type: ignore[union-attr]
        if canonical(name) in DEVICE_HAS:
            continue
        marker = marker.strip()
        if marker and not _applies(marker, python):
            continue
        try:
            wanted.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            wanted.append(requirement.strip())
    return wanted


def _applies(marker: str, python: str) -> bool:
    """The one kind of marker gpudoc's requirements use: ``python_version <op> 'X.Y'``."""
    found = re.fullmatch(r"python_version\s*(<=|>=|<|>|==|!=)\s*['\"](\d+)\.(\d+)['\"]", marker)
    if not found:
        return True
    op, major, minor = found.group(1), int(found.group(2)), int(found.group(3))
    have = tuple(int(p) for p in python.split("."))
    want = (major, minor)
    return {"<": have < want, "<=": have <= want, ">": have > want, ">=": have >= want, "==": have == want,
            "!=": have != want}[op]


def device_call() -> dict:
    return {"command": "PYTHONUNBUFFERED=1 python3 bench/gpu/validate", "carry": [WHEELS.name],
            "timeout_s": DEVICE_CALL_TIMEOUT_S}


def main() -> int:
    shutil.rmtree(WHEELS, ignore_errors=True)
    WHEELS.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    print("prepare: building gpudoc's wheel", file=sys.stderr)
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(WHEELS), str(REPO)], check=True)
    wanted = requirements()
    print(f"prepare: downloading {', '.join(wanted)} for Python 3.12 manylinux x86-64", file=sys.stderr)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([*pip, "download", "-q", "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                    "cp", *platforms, "-d", str(WHEELS), *wanted], check=True)
    for wheel in WHEELS.glob("*.whl"):  # what a requirement pulled in that the machine already has
        if canonical(wheel.name.split("-")[0]) in DEVICE_HAS:
            wheel.unlink()
    size = sum(p.stat().st_size for p in WHEELS.iterdir())
    names = sorted(p.name for p in WHEELS.glob("*.whl"))
    print(f"prepare: {len(names)} wheels, {size / 2**20:.1f} MiB in {WHEELS.name}/: {', '.join(names)}",
          file=sys.stderr)
    if size > CARRY_LIMIT // 2:
        print(f"prepare: {WHEELS.name}/ is over half of what one device call may carry", file=sys.stderr)
        return 1
    print("prepare: now make this device call (the `run` verb), then read $OUT's summary.txt and report.json:")
    print(json.dumps(device_call(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
