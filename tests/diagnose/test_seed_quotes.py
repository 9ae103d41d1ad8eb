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
                         "15.6 GiB; the card was full.")


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
