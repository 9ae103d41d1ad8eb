"""Message shapes beyond the corpus, written from the formats PyTorch and friends print."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoc.diagnose.diagnosis import SPEC_KEYS, Diagnosis
from gpudoc.diagnose.text import diagnose_many, diagnose_text
from gpudoc.units import GIB, MIB

# c10/cuda/CUDACachingAllocator.cpp, >= 2.2 (capacity, per-process lines, private pools, allowed).
NEW = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
    "of 79.15 GiB of which 1.50 GiB is free. Process 4242 has 30.00 GiB memory in use. Including "
    "non-PyTorch memory, this process has 47.60 GiB memory in use. 60.00 GiB allowed; Of the allocated "
    "memory 40.00 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA "
    "Graphs), and 6.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# 1.10-1.13, with the max_split_size_mb hint.
MID = (
    "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 1; 10.76 GiB total capacity; "
    "9.10 GiB already allocated; 301.56 MiB free; 9.45 GiB reserved in total by PyTorch) If reserved "
    "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)


def test_spec_keys_exactly_first():
    d = diagnose_text(NEW).to_dict()
    assert tuple(d)[: len(SPEC_KEYS)] == SPEC_KEYS
    assert d["other_processes"] == [{"pid": 4242, "bytes": 30 * GIB}]
    assert Diagnosis.from_dict(d) == diagnose_text(NEW)


def test_newest_format_every_figure():
    d = diagnose_text(NEW)
    assert (d.cause, d.backend, d.gpu_index) == ("gpu_oom", "cuda", 3)
    assert d.requested_bytes == 2 * GIB
    assert d.total_bytes == int(79.15 * GIB)
    assert d.free_bytes == int(1.5 * GIB)
    assert d.allocated_bytes == 40 * GIB
    assert d.private_pools_bytes == 1 * GIB
    assert d.reserved_unallocated_bytes == int(6.5 * GIB)
    assert d.allowed_bytes == 60 * GIB
    assert d.this_process_bytes == int(47.6 * GIB)
    assert d.fragmentation
    assert "GPU 3" in d.summary


def test_mid_format_reserved_minus_allocated():
    d = diagnose_text(MID)
    assert d.gpu_index == 1
    assert d.reserved_bytes == int(9.45 * GIB)
    assert d.reserved_unallocated_bytes == int(9.45 * GIB) - int(9.10 * GIB)
    assert not d.fragmentation


def test_capacty_typo_and_missing_gpu_index():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU  has a total "
            "capacty of 7.79 GiB of which 3.12 MiB is free. Of the allocated memory 7.10 GiB is allocated by "
            "PyTorch, and 80.00 MiB is reserved by PyTorch but unallocated.")
    d = diagnose_text(text)
    assert d.cause == "gpu_oom" and d.gpu_index is None
    assert d.total_bytes == int(7.79 * GIB) and d.free_bytes == int(3.12 * MIB)
    assert "the GPU" in d.summary


def test_message_wrapped_by_terminal_across_lines():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 304.00 MiB.\n"
            "GPU 0 has a total capacity of 94.97 GiB of which 218.81 MiB is free.\n"
            "Including non-PyTorch memory, this process has 93.84 GiB memory in use.\n"
            "Of the allocated memory 91.19 GiB is allocated by PyTorch, with 118.00 MiB\n"
            "allocated in private pools (e.g., CUDA Graphs), and 744.36 MiB is reserved by\n"
            "PyTorch but unallocated.\n")
    d = diagnose_text(text)
    assert d.free_bytes == int(218.81 * MIB)
    assert d.this_process_bytes == int(93.84 * GIB)
    assert d.private_pools_bytes == 118 * MIB
    assert d.reserved_unallocated_bytes == int(744.36 * MIB)


@pytest.mark.parametrize("text,backend", [
    ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", "cuda"),
    ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510", "cuda"),
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=2 : out of memory", "cuda"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cuda"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda"),
    ("node1:123:456 [2] include/alloc.h:48 NCCL WARN Cuda failure 2 'out of memory'", "cuda"),
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes", "cuda"),
    ("RuntimeError: HIP error: out of memory", "hip"),
    ("RuntimeError: hipErrorOutOfMemory", "hip"),
    ("2024-01-01 E external/xla/xla/stream_executor/cuda/cuda_driver.cc:628] failed to alloc 8589934592 bytes "
     "on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "cuda"),
    ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 1.50GiB (1610612736B) on device ordinal 0", "xla"),
    ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 20.5G of 15.48G hbm.", "xla"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[8,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc", "tensorflow"),
])
def test_other_gpu_oom_shapes(text, backend):
    d = diagnose_text(text)
    assert d.cause == "gpu_oom", d.summary
    assert d.backend == backend


def test_tf_oom_on_cpu_is_host_memory():
    d = diagnose_text("ResourceExhaustedError: OOM when allocating tensor with shape[100000,100000] and type "
                      "float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu")
    assert d.cause == "host_oom"


def test_tf_gpu_index_and_estimate():
    d = diagnose_text("OOM when allocating tensor with shape[8,1024,1024] and type half on "
                      "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc")
    assert d.gpu_index == 1 and d.requested_bytes == 8 * 1024 * 1024 * 2


@pytest.mark.parametrize("text,cause", [
    # Memory words inside other failures are not OOMs.
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "error"),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376", "error"),
    ("ValueError: model 'oom-7b' not found in registry", "error"),
    ("UserWarning: CUDA out of memory while warming up, retrying with a smaller batch\n", "ok"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried "
     "to allocate 21474836480 bytes.", "host_oom"),
    ("RuntimeError: [enforce fail at CPUAllocator.cpp:68] . DefaultCPUAllocator: can't allocate memory: you "
     "tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)", "host_oom"),
    ("MemoryError: Unable to allocate 7.45 GiB for an array with shape (1000000, 1000) and data type float64", "host_oom"),
    ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc", "host_oom"),
    ("[12345.678] Memory cgroup out of memory: Killed process 4321 (python) total-vm:1kB", "host_oom"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "host_oom"),
    ("Bus error (core dumped)", "shm"),
    ("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-XXXX (size 9637888)", "shm"),
    ("RuntimeError: unable to mmap 1048576 bytes from file </torch_1234_5678_0>: Cannot allocate memory (12)", "shm"),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800470 milliseconds before timing out.", "nccl_timeout"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
     "for recv operation to complete", "nccl_timeout"),
    ("slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***", "signal"),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15", "signal"),
    ("Segmentation fault (core dumped)", "error"),
    ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\n"
     "KeyError: 'labels'", "error"),
])
def test_causes(text, cause):
    assert diagnose_text(text).cause == cause


def test_unknown_log_summarises_the_exception():
    d = diagnose_text("step 10 loss 2.3\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                      "ValueError: too many values to unpack (expected 2)\n", exit_code=1)
    assert d.cause == "error" and d.exit_code == 1
    assert "ValueError: too many values to unpack" in d.summary


@pytest.mark.parametrize("code,cause", [(0, "ok"), (137, "host_oom"), (-9, "host_oom"), (143, "signal"),
                                        (-15, "signal"), (135, "shm"), (139, "error"), (1, "error"),
                                        (None, "ok")])
def test_exit_code_alone(code, cause):
    d = diagnose_text("epoch 1 step 5 loss 0.3\n", exit_code=code)
    assert d.cause == cause
    assert d.exit_code == code
    assert d.inferred or cause == "ok"


def test_gpu_oom_explains_a_kill():
    # gpudoc itself (or torchrun) kills the job after the OOM: the OOM is the cause, not the kill.
    d = diagnose_text(MID + "\nKilled\n", exit_code=137)
    assert d.cause == "gpu_oom" and d.exit_code == 137


def test_rank_prefixes_of_every_launcher():
    for prefix, rank in [("[rank5]:", 5), ("[default2]:", 2), ("3: ", 3), ("[1,6]<stderr>:", 6),
                         ("(RayTrainWorker pid=1, ip=10.0.0.1) [rank4]:", 4),
                         ("2024-05-01T10:00:00.123Z [rank7]:", 7)]:
        d = diagnose_text(f"{prefix} {NEW}")
        assert d.rank == rank, prefix


def test_ansi_colours_are_ignored():
    d = diagnose_text("\x1b[31m[rank1]: " + MID + "\x1b[0m")
    assert d.cause == "gpu_oom" and d.rank == 1 and d.gpu_index == 1


TORCHRUN = """\
[rank0]:[E501 10:00:00.000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.
[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 40, in <module>
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 3 has a total capacity of 23.68 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 23.17 GiB memory in use. Of the allocated memory 22.00 GiB is allocated by PyTorch, and 700.00 MiB is reserved by PyTorch but unallocated.
[rank1]:[E501 10:00:01.000 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.
W0501 10:00:02.000 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 101 closing signal SIGTERM
E0501 10:00:03.000 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 100) of binary: python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-01_10:00:03
  host      : node-a
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 103)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:03
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 100)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 100
============================================================
"""


def test_torchrun_root_cause_names_the_wrong_rank():
    d = diagnose_text(TORCHRUN, exit_code=1)
    assert (d.cause, d.rank, d.gpu_index) == ("gpu_oom", 3, 3)
    assert d.requested_bytes == GIB
    assert "Rank 3" in d.summary


def test_torchrun_root_cause_fills_a_missing_rank():
    text = TORCHRUN.replace("[rank3]: ", "").replace("[rank0]:", "").replace("[rank1]:", "")
    d = diagnose_text(text)
    assert d.cause == "gpu_oom"
    assert d.rank in (0, 3)  # no prefix left: torchrun's summary is all there is


def test_only_timeouts_and_abort_is_nccl_timeout():
    text = "\n".join(line for line in TORCHRUN.splitlines() if "rank3" not in line)
    assert diagnose_text(text).cause == "nccl_timeout"


def test_error_before_timeouts_wins():
    text = ("[rank2]: Traceback (most recent call last):\n[rank2]: KeyError: 'input_ids'\n"
            + TORCHRUN.splitlines()[0])
    d = diagnose_text(text)
    assert (d.cause, d.rank) == ("error", 2)


def test_diagnose_many_finds_the_oom_node():
    node_a = TORCHRUN.splitlines()[0] + "\n" + TORCHRUN.splitlines()[4]
    node_b = "[rank3]: " + NEW
    d = diagnose_many([("node-a", node_a, 1), ("node-b", node_b, 1)])
    assert (d.cause, d.node, d.rank) == ("gpu_oom", "node-b", 3)
    assert "node-a: nccl_timeout" in d.summary


def test_diagnose_many_all_ok():
    assert diagnose_many([("a", "done\n", 0), ("b", "", 0)]).cause == "ok"


def test_summary_names_another_process():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
            "23.65 GiB of which 2.00 GiB is free. Process 999 has 12.00 GiB memory in use. Including non-PyTorch "
            "memory, this process has 9.60 GiB memory in use. Of the allocated memory 9.00 GiB is allocated by "
            "PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.")
    d = diagnose_text(text)
    assert d.other_processes == ((999, 12 * GIB),)
    assert "another process holds 12.0 GiB" in d.summary
    assert not d.fragmentation


def test_bytes_input_and_huge_noise():
    blob = (b"step loss 1.0\n" * 50000) + MID.encode() + b"\n"
    assert diagnose_text(blob).cause == "gpu_oom"


# ---- a rank dies, the survivors report losing it ---------------------------------------------

LOGS = Path(__file__).parent / "logs"

# torchrun's summary when rank 1 was SIGKILLed and rank 0 was torn down with SIGTERM.
KILLED_SUMMARY = """\
W0501 10:00:02.000 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 700 closing signal SIGTERM
E0501 10:00:02.100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 701) of binary: python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-01_10:00:02
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 700)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 700
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:02
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 701)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 701
============================================================
"""

SURVIVOR_TRACEBACK = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "train.py", line 61, in main
[rank0]:     dist.all_reduce(loss)
[rank0]:   File "torch/distributed/distributed_c10d.py", line 2501, in all_reduce
[rank0]:     work.wait()
"""

PEER_LOST = [
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[127.0.0.1]:12345",
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:29500: "
    "Connection reset by peer",
    "[rank0]: terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
    "[rank0]:   what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
    "op.preamble.length <= op.nbytes. 881216 vs 4",
    "[rank0]: terminate called after throwing an instance of 'gloo::IoException'\n"
    "[rank0]:   what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Write error [127.0.0.1]:29500: "
    "Broken pipe",
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5\n"
    "[rank0]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely.\n[rank0]: Last error:\n[rank0]: socketProgress: Connection closed by remote peer node-a<43084>",
    "[rank0]: torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
]


def test_real_torchrun_log_rank_sigkilled_under_gloo():
    # Recorded from `gpudoc run -- torchrun --nproc_per_node=2 …` with rank 1 SIGKILLing itself
    # while rank 0 waits in a gloo barrier (tests/launch/jobs/ranks.py sigkill).
    text = (LOGS / "torchrun_gloo_sigkill.log").read_text(encoding="utf-8")
    d = diagnose_text(text, exit_code=1)
    assert (d.cause, d.rank, d.signal, d.pid) == ("host_oom", 1, "SIGKILL", 32546)
    assert d.inferred
    assert "exitcode: -9" in d.evidence
    assert "Rank 1" in d.summary and "rank 0 then lost the connection" in d.summary


@pytest.mark.parametrize("survivor", PEER_LOST)
@pytest.mark.parametrize("kill_first", [False, True])
def test_peer_loss_is_a_consequence_of_a_killed_rank(survivor, kill_first):
    parts = [SURVIVOR_TRACEBACK + survivor + "\n", KILLED_SUMMARY]
    d = diagnose_text("".join(reversed(parts) if kill_first else parts), exit_code=1)
    assert (d.cause, d.rank, d.signal) == ("host_oom", 1, "SIGKILL"), d.summary
    assert d.inferred


@pytest.mark.parametrize("survivor", PEER_LOST)
def test_peer_loss_alone_is_an_error_that_points_elsewhere(survivor):
    # Nothing says why the peer went away: the survivor's error is all there is.
    d = diagnose_text(SURVIVOR_TRACEBACK + survivor + "\n", exit_code=1)
    assert (d.cause, d.rank) == ("error", 0)
    assert "lost its connection to another rank" in d.summary


def test_peer_loss_with_only_the_teardown_sigterm_stays_an_error():
    # torchrun SIGTERMs the survivors after the first failure: that is no rank dying on its own.
    summary = "\n".join(line for line in KILLED_SUMMARY.split("Root Cause")[0].splitlines() if "-9" not in line)
    d = diagnose_text(SURVIVOR_TRACEBACK + PEER_LOST[0] + "\n" + summary, exit_code=1)
    assert d.cause == "error" and "Connection closed by peer" in d.summary


def test_peer_loss_before_the_dead_ranks_gpu_oom():
    text = PEER_LOST[0] + "\n[rank1]: " + NEW + "\n"
    d = diagnose_text(text, exit_code=1)
    assert (d.cause, d.rank, d.gpu_index) == ("gpu_oom", 1, 3)
    assert "rank 0 then lost the connection" in d.summary


def test_peer_loss_and_the_kernel_oom_killer():
    text = (PEER_LOST[1] + "\n[441280.839852] Out of memory: Killed process 701 (python) total-vm:90000000kB\n"
            + KILLED_SUMMARY)
    d = diagnose_text(text, exit_code=1)
    assert (d.cause, d.pid) == ("host_oom", 701)
    assert not d.inferred  # the OOM killer's own line


def test_peer_loss_before_the_dead_ranks_exception():
    text = PEER_LOST[0] + "\n[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 'labels'\n"
    d = diagnose_text(text, exit_code=1)
    assert (d.cause, d.rank) == ("error", 1)
    assert "KeyError" in d.summary


def test_nccl_remote_error_with_the_peer_named_by_torchrun_is_that_peers_exit():
    summary = KILLED_SUMMARY.replace("-9 (pid: 701)", "1 (pid: 701)").replace(
        "Signal 9 (SIGKILL) received by PID 701", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    ).replace("failed (exitcode: -9)", "failed (exitcode: 1)")
    d = diagnose_text(SURVIVOR_TRACEBACK + PEER_LOST[4] + "\n" + summary, exit_code=1)
    # Rank 0 lost its peer; torchrun's Root Cause says which: rank 1, exit status 1, first.
    assert (d.cause, d.rank, d.inferred) == ("error", 1, True)
    assert "exited with status 1, torchrun's first observed failure" in d.summary
    # Without torchrun's account, the survivor's own error is all there is.
    alone = diagnose_text(SURVIVOR_TRACEBACK + PEER_LOST[4] + "\n", exit_code=1)
    assert (alone.cause, alone.rank) == ("error", 0) and "remote process exited" in alone.evidence


# ---- evidence comes from messages, never from traceback source lines -------------------------

# Python 3.11's rendering of an OOM raised by a wrapper that builds its own message; the source
# line carries a stale literal, the message the real figures.
RAISED_OOM = """\
Traceback (most recent call last):
  File "train.py", line 13, in <module>
    step(batch)
  File "train.py", line 4, in step
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 7 has a total capacity of 16.00 GiB of which 1.00 GiB is free.")
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 3.12 MiB is free. Of the allocated memory 7.10 GiB is allocated by PyTorch, and 80.00 MiB is reserved by PyTorch but unallocated.
"""

# A call spread over lines: only the opening line is shown, which names the class and no figures.
RAISED_OOM_MULTILINE = """\
[rank2]: Traceback (most recent call last):
[rank2]:   File "train.py", line 13, in <module>
[rank2]:     allocate(1)
[rank2]:   File "train.py", line 7, in allocate
[rank2]:     raise torch.cuda.OutOfMemoryError(
[rank2]:     torch.cuda.OutOfMemoryError(
[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 7.79 GiB of which 3.12 MiB is free. Of the allocated memory 7.10 GiB is allocated by PyTorch, and 80.00 MiB is reserved by PyTorch but unallocated.
"""


@pytest.mark.parametrize("text,gpu,line", [(RAISED_OOM, 0, 6), (RAISED_OOM_MULTILINE, 1, 7)])
def test_oom_figures_come_from_the_message_not_the_raise_line(text, gpu, line):
    d = diagnose_text(text)
    assert (d.cause, d.gpu_index, d.line_number) == ("gpu_oom", gpu, line)
    assert d.requested_bytes == 20 * MIB
    assert d.total_bytes == int(7.79 * GIB)
    assert d.free_bytes == int(3.12 * MIB)
    assert d.allocated_bytes == int(7.10 * GIB)
    assert d.reserved_unallocated_bytes == 80 * MIB
    assert d.evidence.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")


def test_flattened_traceback_raise_line_is_still_code():
    # Indentation lost (pasted into an issue): a "raise X(" statement still cannot be a message.
    text = "\n".join(line.strip() for line in RAISED_OOM.splitlines())
    d = diagnose_text(text)
    assert (d.gpu_index, d.requested_bytes) == (0, 20 * MIB)


@pytest.mark.parametrize("code", [
    "    out = model(x)  # may raise torch.cuda.OutOfMemoryError on big batches",
    "    except torch.cuda.OutOfMemoryError:",
    "    if 'CUDA out of memory' in str(e): raise MemoryError('Killed')",
])
def test_source_lines_quoting_failures_are_not_evidence(code):
    text = f"Traceback (most recent call last):\n  File \"train.py\", line 9, in step\n{code}\nValueError: bad shape\n"
    d = diagnose_text(text, exit_code=1)
    assert d.cause == "error" and d.evidence == "ValueError: bad shape"


def test_cpp_backtrace_frames_are_not_evidence():
    text = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 "
            "(most recent call first):\n"
            "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f0 in libc10.so)\n"
            "frame #1: c10::OutOfMemoryError::OutOfMemoryError(c10::SourceLocation) + 0x6 (0x7f1 in libc10.so)\n")
    d = diagnose_text(text)
    assert d.cause == "error" and "illegal memory access" in d.summary


def test_rich_traceback_box_is_not_evidence():
    text = ("╭──────────────── Traceback (most recent call last) ────────────────╮\n"
            "│ /home/user/train.py:12 in step                                      │\n"
            "│ ❱ 12 │   raise torch.OutOfMemoryError(\"CUDA out of memory. Tried to allocate 2.00 GiB\") │\n"
            "│ │ msg = 'CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1 GiB total capacity)' │\n"
            "╰─────────────────────────────────────────────────────────────────────╯\n"
            "ValueError: bad shape\n")
    assert diagnose_text(text).cause == "error"


def test_diagnose_many_prefers_the_node_whose_rank_died():
    # Node A's rank only lost its peer; node B's torchrun saw its rank SIGKILLed.
    node_a = SURVIVOR_TRACEBACK + PEER_LOST[0] + "\n"
    d = diagnose_many([("node-a", node_a, 1), ("node-b", KILLED_SUMMARY, 1)])
    assert (d.cause, d.node, d.rank) == ("host_oom", "node-b", 1)
    assert "node-a: error" in d.summary
    alone = diagnose_text(node_a)
    assert alone.peer_lost and alone.to_dict()["peer_lost"] is True
