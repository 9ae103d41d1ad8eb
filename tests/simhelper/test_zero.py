"""DeepSpeed ZeRO-1/2 on meta: one rank's share of the optimizer and the gradients, the reduce
bucket in backward and the fp32 share of the step, counted as DeepSpeed allocates them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpudoc.simhelper.build import Job  # noqa: E402
from gpudoc.simhelper.emulate import Emulation  # noqa: E402
from gpudoc.simhelper.step import Simulation  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes  # noqa: E402

N = 4 * 1024 * 1024  # parameters: four 1024 x 1024 bf16 matrices, 8 MiB
BUCKET = 1 << 20  # a 1M-element reduce bucket: 2 MiB of bf16


def _steady(zero: dict | None, accumulation: int = 1) -> dict:
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)])
    model = model.to(torch.bfloat16)
    job = Job(model, lambda b: torch.empty(b, 1024, device="meta", dtype=torch.bfloat16), [])
    spec = {"optimizer": "adamw", "optimizer_impl": "foreach", "gradient_accumulation_steps": accumulation,
            "zero": zero}
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        return Simulation(spec, job, emulation, tracker).run([4])[0]["steady_state"]


def test_stage_2_keeps_one_rank_share_of_states_and_gradients():
    steady = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET})
    share = N // 4
    kinds = steady["breakdown"]
    assert steady["stage"] == "optimizer"
    assert kinds["weights"] == 2 * N  # the whole model in bf16 on every rank
    assert kinds["optimizer"] == 12 * share  # fp32 master share + two fp32 moments of it
    # At the step's peak: the bf16 share, its flattened copy and its fp32 cast (2 + 2 + 4 B).
    assert kinds["gradients"] + kinds["temporaries"] == 8 * share
    assert steady["peak_bytes"] == 2 * N + 12 * share + 8 * share


def test_stage_2_backward_holds_the_bucket_not_the_whole_gradients():
    stage2 = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET})["stage_peaks"]["backward"]
    stage1 = _steady({"stage": 1, "world": 4, "reduce_bucket_size": BUCKET})["stage_peaks"]["backward"]
    share, held = N // 4, 2 * N + 12 * (N // 4) + 2 * BUCKET  # weights, optimizer share, bucket
    # Stage 1: every gradient whole until the boundary, then the bucket and the share beside them.
    assert stage1 == held + 2 * N + 2 * share
    # Stage 2: the share, and no more than one matrix's gradient on its way to the bucket (and the
    # micro batch's few activations).
    assert 2 * 1024 * 1024 <= stage2 - held - 2 * share < 2 * 1024 * 1024 + 100_000
    bigger = _steady({"stage": 2, "world": 4, "reduce_bucket_size": 4 * BUCKET})["stage_peaks"]["backward"]
    assert bigger - stage2 == 2 * 3 * BUCKET  # the bucket is allocated whole, whatever the gradients need


def test_accumulation_keeps_the_gradient_share_through_the_next_forward():
    one = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET})["stage_peaks"]["forward"]
    two = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET}, accumulation=2)["stage_peaks"]["forward"]
    assert two - one == 2 * (N // 4)


def test_overlap_comm_doubles_the_bucket_and_without_contiguous_gradients_it_is_no_bigger_than_the_model():
    base = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET})["stage_peaks"]["backward"]
    overlap = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET, "overlap_comm": True})
    assert overlap["stage_peaks"]["backward"] - base == 2 * BUCKET
    huge = {"stage": 2, "world": 4, "reduce_bucket_size": 100 * N}
    flat = _steady({**huge, "contiguous_gradients": False})["stage_peaks"]["backward"]
    assert _steady(huge)["stage_peaks"]["backward"] - flat == 2 * 99 * N  # buffered_reduce_fallback: N at most


def test_with_the_optimizer_on_the_host_a_rank_keeps_no_share_only_the_buckets_and_a_staging_buffer():
    """offload_optimizer: the fp32 share, its states and the gradients' share are the host's; each
    reduced gradient leaves through a buffer the size of the largest parameter (a 1024 x 1024 matrix),
    held from start-up."""
    offload = _steady({"stage": 2, "world": 4, "reduce_bucket_size": BUCKET, "offload_optimizer": True})
    staging = 2 * N // 4
    assert offload["breakdown"]["optimizer"] == 0
    assert offload["stage_peaks"]["setup"] == pytest.approx(2 * N + staging, abs=64 * 1024)  # bf16 model, buffer
    # Backward: the bucket beside them and one matrix's gradient on its way, no share of the gradients.
    assert 2 * N + staging + 2 * BUCKET + 2 * N // 4 <= offload["stage_peaks"]["backward"] \
        < 2 * N + staging + 2 * BUCKET + 2 * N // 4 + 100_000
