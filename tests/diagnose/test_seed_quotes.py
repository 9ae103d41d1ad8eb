"""The out-of-memory errors the seed guides quote (../shared/fixtures/seeds), read as their
writers' readers would read them: the cause, every figure the text gives, and one sentence that
agrees with the numbers."""

from __future__ import annotations

from gpudoc.diagnose.text import diagnose_text
from gpudoc.units import GIB, MIB

# seed 004, as the guide prints it: PyTorch's message hard-wrapped over three lines.
SEED_004 = ("torch.OutOfMemoryError: CUDA out of memory.\nTried to allocate 2.00 MiB. GPU 0 has a total capacity "
            "of 15.57 GiB\nof which 2.44 MiB is free.\n")
SEED_001 = "- Error: `CUDA out of memory. Tried to allocate 3.91 GiB. GPU has 3.8 GiB free`\n"
SEED_002 = "RuntimeError: CUDA out of memory. Tried to allocate X.XX GiB\n"


def test_seed_004_wrapped_keeps_every_figure_and_calls_the_card_full():
    d = diagnose_text(SEED_004)
    assert (d.cause, d.backend, d.gpu_index) == ("gpu_oom", "cuda", 0)
    assert d.requested_bytes == 2 * MIB
    assert d.total_bytes == int(15.57 * GIB)
    assert d.free_bytes == int(2.44 * MIB)
    assert d.summary == ("The job ran out of CUDA memory on GPU 0: it asked for 2.0 MiB with 2.4 MiB free of "
                         "15.6 GiB; the card was full (it had 2.4 MiB free, less than the 20.0 MiB segment the "
                         "allocator asks the driver for to serve 2.0 MiB).")


def test_seed_004_on_one_line_says_the_same():
    one_line = " ".join(SEED_004.split("\n")).strip() + "\n"
    assert diagnose_text(one_line).summary == diagnose_text(SEED_004).summary


def test_seed_001_reads_the_free_figure_of_its_short_form():
    d = diagnose_text(SEED_001)
    assert d.cause == "gpu_oom"
    assert d.requested_bytes == int(3.91 * GIB) and d.free_bytes == int(3.8 * GIB)
    assert "it asked for 3.9 GiB with 3.8 GiB free" in d.summary


def test_seed_002_placeholder_is_pytorchs_message_not_a_raw_cuda_allocation():
    d = diagnose_text(SEED_002)
    assert d.cause == "gpu_oom" and d.requested_bytes is None
    assert "raw CUDA allocation" not in d.summary
    assert "PyTorch's allocator" in d.summary


def test_a_raw_cuda_failure_is_still_named_so():
    d = diagnose_text("RuntimeError: CUDA error: out of memory\n")
    assert d.cause == "gpu_oom" and "a raw CUDA allocation outside PyTorch's allocator failed" in d.summary


# seed 004's figures inside PyTorch's full message: 15.56 GiB of the 15.57 GiB card in use by the job.
SEED_004_FULL = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity "
                 "of 15.57 GiB of which 2.44 MiB is free. Including non-PyTorch memory, this process has 15.56 GiB "
                 "memory in use. Of the allocated memory 15.27 GiB is allocated by PyTorch, and 17.08 MiB is reserved "
                 "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")


def test_seed_004_full_message_is_a_full_card_not_something_outside_the_allocator():
    d = diagnose_text(SEED_004_FULL)
    assert d.this_process_bytes == int(15.56 * GIB) and d.free_bytes == int(2.44 * MIB)
    # 2.44 MiB free covers the 2 MiB asked for, but not the 20 MiB segment the allocator asks the driver for.
    assert "the card was full (it had 2.4 MiB free, less than the 20.0 MiB segment" in d.summary
    assert "outside the allocator's view" not in d.summary


def test_a_full_card_with_a_large_idle_reservation_says_both():
    log = SEED_004_FULL.replace("17.08 MiB is reserved", "150.00 MiB is reserved")
    d = diagnose_text(log)
    assert "the card was full" in d.summary and "150.0 MiB reserved by PyTorch but unallocated" in d.summary


def test_free_above_the_segment_is_still_read_as_held_elsewhere():
    # 1 GiB free of 15.57 GiB for a 2 MiB request: room for the segment, so the card was not the limit.
    log = SEED_004_FULL.replace("2.44 MiB is free", "1.00 GiB is free")
    assert "outside the allocator's view" in diagnose_text(log).summary
