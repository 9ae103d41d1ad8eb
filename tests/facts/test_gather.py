"""gather_facts: NVML (fake, fed by a real capture) or snapshot files, plus /proc, host and env."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime

import pytest

from gpudoc.errors import InputError
from gpudoc.facts.gather import gather_facts
from gpudoc.facts.model import Facts, GpuProcess
from gpudoc.facts.smi_files import load_snapshot
from tests.conftest import NVIDIA_SMI
from tests.facts.fake_nvml import LIBRARY_NOT_FOUND, FakeNvml

MIB = 1024**2
T4 = NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml"
DOCKER = NVIDIA_SMI / "nvidia-htop__test__FAKE_STDIN_NO_PROCESSES_DOCKER.txt"  # memory in use, no process listed
L40S = NVIDIA_SMI / "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-l40s__595.80__load__nvidia-smi.txt"


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


def test_real_nvml_absent_gives_an_error_and_the_rest_of_the_facts():
    facts = gather_facts(environ={"CUDA_VISIBLE_DEVICES": "0", "SECRET": "x"})
    assert facts.nvml_error == "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"
    assert facts.gpus == () and facts.processes == ()
    assert facts.source == "none"
    assert facts.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert facts.host.cpu_count >= 1
    assert facts.torch is None
    datetime.fromisoformat(facts.collected_at)


def test_nvml_facts_with_process_facts_for_the_gpu_pids(sleeper):
    # A T4 capture whose compute process is a real local process, plus one that has gone.
    captured = load_snapshot([T4])
    gpu = captured.gpus[0]
    gpu = replace(gpu, processes=(GpuProcess(pid=sleeper.pid, used_memory_bytes=1005 * MIB, name="sleep", type="C"),
                                  GpuProcess(pid=4_194_305, used_memory_bytes=22 * MIB, name="ghost", type="C")))
    backend = FakeNvml(replace(captured, gpus=(gpu,)))
    facts = gather_facts(nvml_backend=backend, environ={})
    assert facts.source == "nvml" and facts.nvml_error is None
    assert facts.driver_version == "515.105.01" and facts.cuda_driver_version == "11.7"
    assert [p.pid for p in facts.processes] == [sleeper.pid, 4_194_305]
    mine = facts.process(sleeper.pid)
    assert mine.visible and mine.name == "sleep" and mine.cmdline == ("sleep", "30")
    assert facts.process(4_194_305).visible is False


def test_nvml_init_failure_through_the_seam():
    backend = FakeNvml.from_snapshot(T4, init_error=LIBRARY_NOT_FOUND)
    facts = gather_facts(nvml_backend=backend, environ={})
    assert facts.nvml_error.startswith("NVIDIA driver not loaded")
    assert facts.gpus == ()


def test_snapshot_files_replace_nvml_and_pids_are_not_looked_up_here():
    facts = gather_facts(snapshot_files=[L40S], environ={"OMP_NUM_THREADS": "4"},
                         nvml_backend=FakeNvml.from_snapshot(T4))
    assert facts.source == "snapshot:" + L40S.name
    assert facts.gpus[0].name == "NVIDIA L40S"
    assert [p.pid for p in facts.gpus[0].processes] == [20037, 20038]
    assert facts.processes == ()  # another machine's PIDs say nothing about this one's
    assert facts.env == {"OMP_NUM_THREADS": "4"}


def test_an_nvidia_smi_snapshot_leaves_the_host_unknown_with_the_reason(tmp_path):
    # The file came from another machine: this one's CPUs, /dev/shm and disk must not stand in.
    facts = gather_facts(snapshot_files=[L40S], environ={})
    assert facts.host.hostname is None and facts.host.cpu_count is None
    assert facts.host.shm_total_bytes is None and facts.host.runs_dir_free_bytes is None
    assert "nvidia-smi output says nothing of its machine's CPUs" in facts.host.unavailable["host"]
    # Saved as gpudoc JSON and read back, the facts still say so, and nothing of this machine.
    saved = tmp_path / "check.json"
    saved.write_text(json.dumps({"facts": facts.to_dict()}))
    assert gather_facts(snapshot_files=[saved], environ={}).host == facts.host


def test_gpudoc_json_snapshot_keeps_its_own_host_env_and_processes(tmp_path, sleeper):
    backend = FakeNvml(replace(load_snapshot([T4]), gpus=(replace(
        load_snapshot([T4]).gpus[0], processes=(GpuProcess(pid=sleeper.pid, used_memory_bytes=MIB),)),)))
    original = gather_facts(nvml_backend=backend, environ={"NCCL_DEBUG": "WARN"})
    saved = tmp_path / "check.json"
    saved.write_text(json.dumps({"schema_version": 1, "command": "check", "facts": original.to_dict()}))
    back = gather_facts(snapshot_files=[saved], environ={"OMP_NUM_THREADS": "1"})
    assert back.env == {"NCCL_DEBUG": "WARN"}
    assert back.host == original.host
    assert back.processes == original.processes
    assert back.gpus == original.gpus
    assert back.source == "snapshot:check.json"
    assert Facts.from_dict(json.loads(json.dumps(back.to_dict()))) == back


def test_bad_snapshot_file_is_an_input_error_naming_it(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("nothing to see\n")
    with pytest.raises(InputError, match=str(bad)):
        gather_facts(snapshot_files=[bad])


def test_deep_probe_with_a_python_without_torch(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    facts = gather_facts(snapshot_files=[L40S], deep=True, python=str(venv / "bin" / "python"), environ={})
    assert facts.torch is not None and facts.torch.ok is False
    assert "No module named 'torch'" in facts.torch.error


def test_runs_dir_comes_from_the_run_store(tmp_path):
    from gpudoc.runs.store import RunStore

    store = RunStore(tmp_path / "home")
    facts = gather_facts(nvml_backend=FakeNvml.from_snapshot(L40S), runs=store, environ={})
    assert facts.host.runs_dir == str(store.root)
    assert facts.host.runs_dir_free_bytes > 0


def test_on_bare_metal_memory_no_process_is_listed_for_is_traced_to_the_device_file(tmp_path, monkeypatch):
    # The real capture of a GPU with memory in use and no process listed, read through the fake NVML;
    # a real process holds the GPU's device file open (in a directory standing in for /dev).
    from gpudoc.facts import device_users, host
    from gpudoc.facts.holders import classify_gpu_processes
    from gpudoc.procs.clean import plan_clean

    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_bytes(b"")
    monkeypatch.setattr(device_users, "DEV", dev)
    monkeypatch.setattr(host, "in_container", lambda **_: False)
    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); print(1, flush=True); "
                               "time.sleep(60)", str(dev / "nvidia0")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "1\n"
        backend = FakeNvml.from_snapshot(DOCKER)
        facts = gather_facts(nvml_backend=backend, environ={})
        assert facts.device_users is not None
        assert holder.pid in {o.pid for o in facts.device_users.openers}
        assert facts.process(holder.pid).cmdline[0] == sys.executable
        found = [h for h in classify_gpu_processes(facts) if h.pid == holder.pid]
        assert [(h.kind, h.via_device) for h in found] == [("own_live_job", True)]
        # Named, never cleaned, even orphaned: the driver lists no memory of its own (a monitor holds
        # the file too).
        orphaned = replace(facts, processes=tuple(replace(p, orphaned=True) for p in facts.processes))
        assert [h.kind for h in classify_gpu_processes(orphaned) if h.pid == holder.pid] == ["own_other"]
        assert plan_clean(orphaned, protected=set()) == []
        # In a container the host's processes are out of sight: no look, the host is told to.
        monkeypatch.setattr(host, "in_container", lambda **_: True)
        assert gather_facts(nvml_backend=backend, environ={}).device_users is None
    finally:
        holder.kill()
        holder.wait()


def test_the_owners_index_is_read_once_for_the_drivers_processes_and_the_device_files(tmp_path, monkeypatch,
                                                                                         sleeper):
    """GPU 0 lists a real process; GPU 1 has memory in use and lists none, and a real process holds
    its device file open: both are looked up against one read of the run store's owners."""
    from gpudoc.facts import device_users, host
    from gpudoc.runs.store import RunStore

    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia1").write_bytes(b"")
    monkeypatch.setattr(device_users, "DEV", dev)
    monkeypatch.setattr(host, "in_container", lambda **_: False)
    listed = replace(load_snapshot([T4]).gpus[0], processes=(
        GpuProcess(pid=sleeper.pid, used_memory_bytes=1005 * MIB, name="sleep", type="C"),))
    unlisted = replace(load_snapshot([DOCKER]).gpus[0], index=1)
    reads = []

    class Counted(RunStore):
        def owners(self):
            reads.append(1)
            return super().owners()

    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); print(1, flush=True); "
                               "time.sleep(60)", str(dev / "nvidia1")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "1\n"
        facts = gather_facts(nvml_backend=FakeNvml(replace(load_snapshot([T4]), gpus=(listed, unlisted))),
                             runs=Counted(tmp_path / "home"), environ={})
        assert {sleeper.pid, holder.pid} <= {p.pid for p in facts.processes}  # both looked up
        assert len(reads) == 1
    finally:
        holder.kill()
        holder.wait()
