"""torch's own C++ meta kernels for the ops that have one, in place of its Python ones.

Importing ``torch._meta_registrations`` (torch does at import) puts a Python meta function in front
of the C++ meta kernel of every op in its decomposition tables — ``mul``, ``add``, ``pow`` and most
elementwise ops among them: about a millisecond an op where the C++ kernel takes microseconds, most
of a simulated step's time. The C++ meta kernels are the ones CUDA's structured kernels size their
outputs with, so outputs (shapes, dtypes, strides, bytes) are the same; ops without one keep the
Python function. Private torch API: any surprise leaves torch as it was.
"""

from __future__ import annotations

from typing import Any

# Ops torch itself never gives a Python meta function (recursion or known mismatches).
_KEPT_NATIVE = {"aten::empty_strided", "aten::clone", "aten::_to_copy", "aten::copy_", "aten::constant_pad_nd",
                "aten::rot90", "aten::as_strided_scatter"}
_done = False


def use_native_meta_kernels() -> int:
    """Swap once per process; returns how many ops now run their C++ meta kernel (0: left as it was)."""
    global _done
    if _done:
        return 0
    _done = True
    try:
        return _swap()
    except Exception:  # a torch without this layout: its Python meta functions stay
        return 0


def _swap() -> int:
    import torch
    import torch._meta_registrations as registrations
    from torch._decomp import global_decomposition_table

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    table: dict[Any, Any] = {}
    for kind in ("meta", "post_autograd", "pre_autograd"):  # torch's own precedence (activate_meta)
        for op, fn in global_decomposition_table[kind].items():
            table.setdefault(op, fn)
    python = [(op, fn) for op, fn in table.items() if isinstance(op, torch._ops.OpOverload)
              and op.name().startswith("aten::") and not op.is_view and op.name() not in _KEPT_NATIVE
              and not has(op.name(), "CompositeImplicitAutograd")]
    old = registrations._meta_lib_dont_use_me_use_register_meta
    old._destroy()  # every aten Python meta function at once: the C++ ones underneath come back
    new = torch.library.Library("aten", "IMPL", "Meta")
    native = 0
    for op, fn in python:
        if has(op.name(), "Meta"):
            native += 1
        else:
            new.impl(op, fn)  # no C++ meta kernel: the Python one again
    registrations._meta_lib_dont_use_me_use_register_meta = new
    return native
