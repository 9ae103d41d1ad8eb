"""torch's C++ meta kernels in place of its Python meta functions: the same outputs, far sooner.
Swapped once for the whole process, as the helper does (every later simulation in this worker runs
on them too, with the same answers)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from gpudoc.simhelper.native_meta import use_native_meta_kernels  # noqa: E402


def _elementwise() -> list[tuple]:
    a = torch.empty(2, 512, 1024, device="meta", dtype=torch.bfloat16)
    b = torch.empty(2, 512, 1, device="meta", dtype=torch.float32)
    c = torch.empty(1024, 512, device="meta", dtype=torch.bfloat16).t()  # a transposed operand
    outs = [a * b, a + a, a.pow(2), torch.rsqrt(b), a * c, torch.nn.functional.silu(a), a.mean(-1, keepdim=True)]
    return [(o.shape, o.dtype, o.stride(), o.untyped_storage().nbytes()) for o in outs]


def _seconds_per_mul() -> float:
    a = torch.empty(2, 512, 1024, device="meta", dtype=torch.bfloat16)
    started = time.perf_counter()
    for _ in range(50):
        torch.mul(a, a)
    return (time.perf_counter() - started) / 50


def test_elementwise_ops_run_their_cpp_meta_kernel_with_the_same_outputs():
    before = _elementwise()
    python_meta = "_meta_registrations" in torch._C._dispatch_dump("aten::mul.Tensor").split("Meta:")[1].split("\n")[0]
    swapped = use_native_meta_kernels()
    assert _elementwise() == before
    meta_line = torch._C._dispatch_dump("aten::mul.Tensor").split("Meta:")[1].split("\n")[0]
    assert "_meta_registrations" not in meta_line
    if python_meta:  # the first swap in this process
        assert swapped > 100
    assert _seconds_per_mul() < 200e-6  # the Python meta function takes about a millisecond
    # An op with no C++ meta kernel still has its Python one.
    out = torch.ops.aten._scaled_dot_product_flash_attention(*(torch.empty(1, 2, 8, 16, device="meta",
                                                                           dtype=torch.bfloat16),) * 3)[0]
    assert out.shape == (1, 2, 8, 16)
    assert use_native_meta_kernels() == 0  # once per process
