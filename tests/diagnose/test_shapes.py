"""Message shapes the corpus lacks (issue 15's list): stream-executor and ROCm allocation
failures, a BFC allocator dump without its headline, CUDA device-side assertions without the
RuntimeError after them, and /dev/shm exhaustion disguised as a full disk."""

from __future__ import annotations

from gpudoc.diagnose.text import diagnose_text


def test_a_stream_executor_allocation_failure_gives_its_size():
    d = diagnose_text("2024-01-01 10:00:00.000000: E tensorflow/stream_executor/cuda/cuda_driver.cc:802] failed to "
                      "allocate 10.40G (11170480128 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n")
    assert (d.cause, d.backend, d.requested_bytes) == ("gpu_oom", "cuda", 11170480128)


def test_rocm_spellings_of_out_of_memory():
    for line in ("2024-01-01 10:00:00.000000: E tensorflow/stream_executor/rocm/rocm_driver.cc:630] failed to allocate "
                 "15.98G (17163091968 bytes) from device: hipErrorOutOfMemory",
                 "HIP_ERROR_OUT_OF_MEMORY returned by hipMalloc",
                 "hsa_status_error_out_of_resources: The runtime failed to allocate the necessary resources"):
        d = diagnose_text(line + "\n")
        assert (d.cause, d.backend) == ("gpu_oom", "hip"), line


def test_a_bfc_allocator_dump_without_its_headline_is_a_gpu_oom_with_its_figures():
    log = ("2024-01-01 10:00:00.000000: I tensorflow/core/common_runtime/bfc_allocator.cc:1087] Sum Total of in-use "
           "chunks: 14.56GiB\n"
           "2024-01-01 10:00:00.000000: I tensorflow/core/common_runtime/bfc_allocator.cc:1089] "
           "total_region_allocated_bytes_: 15651045376 memory_limit_: 15651045376 available bytes: 0\n"
           "Limit:                     15651045376\nInUse:                     15634432768\n")
    d = diagnose_text(log)
    assert (d.cause, d.backend) == ("gpu_oom", "tensorflow")
    assert (d.total_bytes, d.allocated_bytes, d.free_bytes) == (15651045376, 15634432768, 16612608)
    assert "14.6 GiB in use of a 14.6 GiB limit" in d.summary


def test_a_device_side_assertion_alone_names_the_kernel_and_the_check():
    d = diagnose_text("/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: "
                      "block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n")
    assert d.cause == "error"
    assert "CUDA device-side assertion in nll_loss_forward_reduce_cuda_kernel_2d" in d.summary
    assert "Loss.cu:240" in d.summary and "t >= 0 && t < n_classes" in d.summary


def test_enospc_from_multiprocessing_is_shared_memory_and_elsewhere_is_not():
    shm = ("Traceback (most recent call last):\n"
           "  File \"/usr/lib/python3.10/multiprocessing/synchronize.py\", line 57, in __init__\n"
           "    sl = self._semlock = _multiprocessing.SemLock(\n"
           "OSError: [Errno 28] No space left on device\n")
    d = diagnose_text(shm)
    assert d.cause == "shm" and "No space left on device" in d.summary
    disk = ("Traceback (most recent call last):\n  File \"train.py\", line 57, in save\n    torch.save(x, path)\n"
            "OSError: [Errno 28] No space left on device\n")
    assert diagnose_text(disk).cause == "error"


def test_a_message_hard_wrapped_at_any_width_keeps_every_figure():
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
               "of 23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, "
               "and 341.25 MiB is reserved by PyTorch but unallocated.")
    whole = diagnose_text(message + "\n")

    def figures(d):
        return (d.requested_bytes, d.total_bytes, d.free_bytes, d.allocated_bytes, d.reserved_unallocated_bytes)

    assert None not in figures(whole)
    for width in range(60, 130, 3):  # a terminal's or a logger's width; cuts fall inside numbers too
        wrapped = "\n".join(message[k:k + width] for k in range(0, len(message), width)) + "\n"
        assert figures(diagnose_text(wrapped)) == figures(whole), width


def test_an_exception_header_split_from_its_message_keeps_the_figures():
    cases = {
        "torch.OutOfMemoryError:\nCUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "23.68 GiB of which 1.12 GiB is free.\n": (2 * 1024**3, 0),
        "RuntimeError:\nCUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 10.76 GiB total capacity; 9.10 GiB "
        "already allocated; 3.56 MiB free; 9.45 GiB reserved in total by PyTorch)\n": (2 * 1024**3, 1),
    }
    for log, (requested, gpu) in cases.items():
        d = diagnose_text(log)
        assert (d.cause, d.requested_bytes, d.gpu_index) == ("gpu_oom", requested, gpu), log
        assert d.free_bytes is not None and d.total_bytes is not None


def test_a_bfc_chunk_listing_alone_in_any_generation_is_a_gpu_oom():
    for line in ("I tensorflow/tsl/framework/bfc_allocator.cc:1096] InUse at 7f0e2c000000 of size 256 next 1",
                 "I external/local_tsl/tsl/framework/bfc_allocator.cc:1100] Free  at 7f0e2c000100 of size 1280 next 2",
                 "I tensorflow/core/common_runtime/bfc_allocator.cc:1039] Bin (256): \tTotal Chunks: 12, Chunks in "
                 "use: 12. 3.0KiB allocated for chunks."):
        d = diagnose_text(line + "\n")
        assert (d.cause, d.backend) == ("gpu_oom", "tensorflow"), line
    # The allocator's routine start-up line is no dump.
    assert diagnose_text("I tensorflow/core/common_runtime/bfc_allocator.cc:45] Using BFC allocator.\n").cause == "ok"


def test_rocm_stream_executor_statuses_give_the_request():
    d = diagnose_text("E0101 xla/stream_executor/rocm/rocm_driver.cc:1123] failed to allocate 2.00GiB (2147483648 "
                      "bytes) from device: HIP_ERROR_OutOfMemory\n")
    assert (d.cause, d.backend, d.requested_bytes) == ("gpu_oom", "hip", 2147483648)


def test_an_impossible_request_on_its_own_line_loses_to_the_collective_timeout_beside_it():
    log = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=7, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out.\n"
           "[rank3]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n")
    d = diagnose_text(log)
    assert (d.cause, d.rank, d.requested_bytes) == ("nccl_timeout", 3, None)


def test_the_watchdogs_fatal_line_for_an_exception_is_a_collective_failure_not_no_failure():
    d = diagnose_text("[rank0]:[F1113 08:31:26.385637245 ProcessGroupNCCL.cpp:1575] [PG ID 0 PG GUID 0(default_pg) "
                      "Rank 0] Terminating the process after attempting to dump debug info, due to collective timeout "
                      "or exception.\n")
    assert (d.cause, d.rank, d.inferred) == ("nccl_timeout", 0, True)
