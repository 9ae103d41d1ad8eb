"""The GPU sampler against the fake NVML backend fed by real nvidia-smi captures."""

from __future__ import annotations

import time

from gpudoc.facts.nvml import read_gpus
from gpudoc.launch.watch import HEADER, GpuSampler, SamplerThread, nvml_reader
from tests.conftest import NVIDIA_SMI
from tests.facts.fake_nvml import FakeNvml

DUAL_A5000 = NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"


def test_samples_every_gpu_into_csv_and_keeps_the_peak(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    _, _, _, gpus, error = read_gpus(backend)
    assert error is None and len(gpus) == 2
    path = tmp_path / "gpu.csv"
    clock = iter([100.0, 101.0])
    sampler = GpuSampler(path, reader=nvml_reader(backend), clock=lambda: next(clock))
    assert sampler.sample() and sampler.sample()
    sampler.close()
    lines = path.read_text().splitlines()
    assert lines[0] + "\n" == HEADER
    assert len(lines) == 1 + 2 * 2
    assert lines[1].startswith("100.000,0,")
    assert sampler.peaks == {str(g.index): g.memory_used_bytes for g in gpus}
    assert [g["index"] for g in sampler.gpus] == [0, 1]
    assert sampler.gpus[0]["total_bytes"] == gpus[0].memory_total_bytes
    assert sampler.gpus[0]["name"] == gpus[0].name


def test_only_the_jobs_visible_gpus_are_sampled(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    sampler = GpuSampler(tmp_path / "gpu.csv", reader=nvml_reader(backend), environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert sampler.sample()
    assert list(sampler.peaks) == ["1"]


def test_job_memory_column_sums_the_jobs_processes(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    _, _, _, gpus, _ = read_gpus(backend)
    holders = [p for g in gpus for p in (g.processes or ())]
    assert holders, "the capture lists GPU processes"
    pids = {holders[0].pid}
    sampler = GpuSampler(tmp_path / "gpu.csv", reader=nvml_reader(backend), job_pids=lambda: pids)
    sampler.sample()
    sampler.close()
    rows = [r.split(",") for r in (tmp_path / "gpu.csv").read_text().splitlines()[1:]]
    # One process spread over both GPUs (the capture's llama-server): each row has its own share.
    assert [r[5] for r in rows] == [str(g.processes[0].used_memory_bytes) for g in gpus]
    other = GpuSampler(tmp_path / "other.csv", reader=nvml_reader(backend), job_pids=lambda: {1})
    other.sample()
    other.close()
    rows = [r.split(",") for r in (tmp_path / "other.csv").read_text().splitlines()[1:]]
    assert [r[5] for r in rows] == ["0", "0"]  # not the job's memory


def test_no_nvml_stops_quietly(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000, init_error=9)
    sampler = GpuSampler(tmp_path / "gpu.csv", reader=nvml_reader(backend))
    assert sampler.sample() is False
    assert sampler.disabled and not (tmp_path / "gpu.csv").exists()
    thread = SamplerThread(sampler, 0.05)
    thread.start()
    thread.join(2)
    assert not thread.is_alive()


def test_thread_samples_until_stopped(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    sampler = GpuSampler(tmp_path / "gpu.csv", reader_factory=lambda: nvml_reader(backend))
    thread = SamplerThread(sampler, 0.05)
    thread.start()
    deadline = time.monotonic() + 5
    while sampler.samples < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    thread.stop()
    assert sampler.samples >= 3
    count = sampler.samples
    time.sleep(0.15)
    assert sampler.samples == count  # stopped means stopped
    assert sampler.sample() is False  # and closed: nothing is written after the run


def test_a_crashing_reader_never_escapes(tmp_path):
    def broken():
        raise RuntimeError("driver went away")

    sampler = GpuSampler(tmp_path / "gpu.csv", reader=broken)
    assert sampler.sample() is False


def test_one_nvml_session_for_the_whole_run(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    sampler = GpuSampler(tmp_path / "gpu.csv", reader_factory=lambda: nvml_reader(backend))
    for _ in range(5):
        assert sampler.sample() is True
    sampler.close()
    assert backend.calls.count("nvmlInit") == 1
    assert backend.calls.count("nvmlShutdown") == 1


def test_nvml_failing_mid_run_is_said_once_kept_and_its_return_noticed(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    real = nvml_reader(backend)
    lost = {"now": False}

    def reader():
        if lost["now"]:
            return (None, None, None, (), "GPU is lost (NVML_ERROR_GPU_IS_LOST)")
        return real()

    said: list[str] = []
    sampler = GpuSampler(tmp_path / "gpu.csv", reader=reader, warn=said.append)
    assert sampler.sample()
    lost["now"] = True
    assert not sampler.sample() and not sampler.sample()
    assert not sampler.disabled  # it keeps trying: a reset GPU may come back
    assert said == ["GPU memory samples stopped: GPU is lost (NVML_ERROR_GPU_IS_LOST); the job goes on, "
                    "the peaks so far are kept"]
    assert sampler.error is not None and "NVML failed mid-run at" in sampler.error
    lost["now"] = False
    assert sampler.sample()
    assert said[-1].startswith("GPU memory samples resumed after ")
    assert sampler.peaks  # the peaks from before the gap are still there


def test_a_csv_that_cannot_be_written_stops_the_file_not_the_peaks(tmp_path):
    backend = FakeNvml.from_snapshot(DUAL_A5000)
    said: list[str] = []
    (tmp_path / "gpu.csv").mkdir()  # any write there fails (as on a full disk)
    sampler = GpuSampler(tmp_path / "gpu.csv", reader=nvml_reader(backend), warn=said.append)
    assert sampler.sample() and sampler.sample()
    assert len(said) == 1 and "cannot write" in said[0]
    assert sampler.peaks and sampler.samples == 2
    assert "cannot write" in (sampler.error or "")
    sampler.close()
