"""Plausibility and cascades: a size no device could hold is a symptom, the job's own process is
not "another process" holding memory, and a consequence phrase never hides the evidence that
shares its line when a log lost its line breaks."""

from __future__ import annotations

from gpudoc.diagnose.text import diagnose_text
from gpudoc.units import GIB, format_bytes, parse_size

TIMEOUT = ("[rank0]:[E1125 10:00:00.000000 123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
           "ran for 600012 milliseconds before timing out.\n")
EXABYTES = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 EiB. GPU 1 has a total "
            "capacity of 79.15 GiB of which 70.00 GiB is free.\n")


def test_an_exabyte_request_beside_a_timeout_is_the_timeouts_symptom():
    for log in (TIMEOUT + EXABYTES, EXABYTES + TIMEOUT):
        d = diagnose_text(log)
        assert d.cause == "nccl_timeout" and d.rank == 0


def test_alone_it_is_still_an_oom_and_says_the_request_cannot_fit_any_gpu():
    d = diagnose_text(EXABYTES)
    assert d.cause == "gpu_oom" and d.requested_bytes == 16 * 1024**6
    assert "16.0 EiB" in d.summary and "larger than the whole GPU" in d.summary


def test_exabytes_parse_and_print():
    assert parse_size("16.00 EiB") == 16 * 1024**6
    assert format_bytes(3 * 1024**5) == "3.0 PiB"


def test_the_jobs_own_process_is_not_another_process():
    log = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
           "capacity of 79.15 GiB of which 20.00 MiB is free. Process 4242 has 12.00 GiB memory in use. Process 777 "
           "has 9.90 GiB memory in use. Including non-PyTorch memory, this process has 9.90 GiB memory in use. Of "
           "the allocated memory 9.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but "
           "unallocated.\n")
    d = diagnose_text(log)
    assert d.other_processes == ((4242, 12 * GIB),)
    assert d.this_process_bytes == parse_size("9.90 GiB")
    assert "another process holds 12.0 GiB" in d.summary


def test_a_consequence_on_the_same_line_does_not_hide_the_oom_beside_it():
    line = ("W1125 10:00:00.000 123 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4243 "
            "closing signal SIGTERM [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 1 has a total capacity of 23.68 GiB of which 1.12 GiB is free.\n")
    d = diagnose_text(line)
    assert d.cause == "gpu_oom" and d.requested_bytes == 2 * GIB and d.gpu_index == 1
    # The consequence alone is never the cause, but it says a worker failed: not "no failure".
    alone = diagnose_text("Sending process 4243 closing signal SIGTERM\n")
    assert (alone.cause, alone.inferred, alone.signal) == ("error", True, None)
    assert "without an error of its own" in alone.summary and "pid 4243" in alone.summary


def test_the_newer_watchdog_hang_wording_is_a_collective_timeout():
    # PyTorch >= 2.2's heartbeat monitor, as in public issue threads (e.g. hiyouga/LlamaFactory#6953).
    log = ("[rank144]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 144] Heartbeat monitor timed out! Process will be "
           "terminated after dumping debug info. workMetaList_.size()=1\n"
           "[rank144]:[E ProcessGroupNCCL.cpp:1153] [PG 0 Rank 144] ProcessGroupNCCL preparing to dump debug info.\n")
    d = diagnose_text(log)
    assert d.cause == "nccl_timeout" and d.rank == 144
    from gpudoc.diagnose.stream import SignatureScanner

    assert [e.cause for e in SignatureScanner().feed(log.encode())] == ["nccl_timeout"]
