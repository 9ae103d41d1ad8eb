"""Facts for check tests, read from the real nvidia-smi captures; only what a test varies is replaced."""

from __future__ import annotations

from dataclasses import replace

from gpudoc.facts.model import Facts, HostFacts
from gpudoc.facts.smi_files import load_snapshot
from gpudoc.findings import Severity
from gpudoc.profiles.model import Profile
from gpudoc.units import GIB
from tests.conftest import NVIDIA_SMI

A5000 = "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"  # 2 GPUs, both busy
T4 = "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml"  # ECC on, persistence off
A100_MIG = "telegraf__plugins__inputs__nvidia_smi__testdata__a100-sxm4-v12.xml"  # MIG, 4 instances
H100_MIG_CSV = "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-h100-mig__590.48.01__load__query-gpu.csv"
EIGHT_1080 = "nvidia-htop__test__FAKE_STDIN.txt"  # 8 GPUs, all busy
DOCKER = "nvidia-htop__test__FAKE_STDIN_NO_PROCESSES_DOCKER.txt"  # memory used, no process listed
RTX3080 = "telegraf__plugins__inputs__nvidia_smi__testdata__rtx-3080-v12.xml"  # desktop apps only
P2000 = "telegraf__plugins__inputs__nvidia_smi__testdata__quadro-p2000-v12.xml"

HOST = HostFacts(hostname="box", user="me", uid=1000, cpu_count=16, ram_total_bytes=64 * GIB,
                 ram_available_bytes=48 * GIB, shm_total_bytes=32 * GIB, shm_free_bytes=32 * GIB,
                 runs_dir="/home/ada/project/.gpudoc/runs", runs_dir_free_bytes=200 * GIB, in_container=False)


def snap(*names: str, env: dict | None = None, host: HostFacts | None = None, live: bool = False) -> Facts:
    """A real capture; ``live`` makes it look read from NVML on this machine (PIDs are local)."""
    facts = load_snapshot([NVIDIA_SMI / n for n in names])
    facts = replace(facts, env=dict(env or {}), host=host or HOST)
    return replace(facts, source="nvml") if live else facts


def profile(**tables) -> Profile:
    return Profile(name="job", **tables)


def sev(findings, severity: Severity) -> list:
    return [f for f in findings if f.severity is severity]


def only(findings, severity: Severity):
    hits = sev(findings, severity)
    assert len(hits) == 1, [(f.severity.value, f.title) for f in findings]
    return hits[0]
