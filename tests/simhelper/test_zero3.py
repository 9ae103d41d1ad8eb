"""DeepSpeed ZeRO-3 with the optimizer on the host, on meta: parameters gathered before each module
and released after it, kept where the recorded trace reuses them within the reuse distance; the
partitions, the transient partition copy and the reduce bucket, counted as DeepSpeed allocates them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpudoc.simhelper.build import Job  # noqa: E402
from gpudoc.simhelper.emulate import Emulation  # noqa: E402
from gpudoc.simhelper.step import Simulation  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes  # noqa: E402

N = 1024 * 1024  # elements of each of the four bf16 matrices: 2 MiB
MATRIX = 2 * N


def _run(reuse: float, *, offload_params: bool = True, world: int = 1) -> dict:
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)])
    model = model.to(torch.bfloat16)
    job = Job(model, lambda b: torch.empty(b, 1024, device="meta", dtype=torch.bfloat16), [])
    spec = {"optimizer": "adamw", "optimizer_impl": "foreach", "gradient_accumulation_steps": 1,
            "zero": {"stage": 3, "world": world, "offload_params": offload_params,
                     "settings": {"stage3_max_reuse_distance": reuse, "reduce_bucket_size": N,
                                  "stage3_param_persistence_threshold": 1e5}}}
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        return Simulation(spec, job, emulation, tracker).run([4])[0]


def test_one_module_is_gathered_at_a_time_with_its_partition_copy_beside_it():
    run = _run(0)
    for step in (run["first_step"], run["steady_state"]):
        # The bucket for good; one gathered matrix and, while it is gathered, its partition's copy.
        assert step["stage_peaks"]["setup"] == pytest.approx(MATRIX, abs=16 * 1024)
        assert step["stage_peaks"]["forward"] == pytest.approx(3 * MATRIX, abs=64 * 1024)
        assert step["breakdown"]["weights"] == MATRIX and step["breakdown"]["optimizer"] == 0


def test_the_trace_keeps_what_it_reuses_within_the_distance_from_the_second_step_on():
    # Distance 2.5 matrices: the last layer (used again at once) and the one before it (after the last
    # layer's forward and backward, 2 matrices) stay gathered into backward; the first step records
    # the trace and keeps nothing.
    run = _run(2.5 * N)
    assert run["first_step"]["breakdown"]["weights"] == MATRIX
    assert run["steady_state"]["breakdown"]["weights"] == 2 * MATRIX
    assert _run(1e9)["steady_state"]["breakdown"]["weights"] == 4 * MATRIX


def test_without_parameter_offload_each_rank_holds_its_partitions():
    held = _run(0, offload_params=False, world=4)["steady_state"]["stage_peaks"]["setup"]
    assert held == pytest.approx(MATRIX + 4 * MATRIX / 4, abs=16 * 1024)  # the bucket and a quarter of each matrix


def _on_gpu(world: int, sub_group: float) -> dict:
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)])
    model = model.to(torch.bfloat16)
    job = Job(model, lambda b: torch.empty(b, 1024, device="meta", dtype=torch.bfloat16), [])
    spec = {"optimizer": "adamw", "optimizer_impl": "foreach", "gradient_accumulation_steps": 1,
            "zero": {"stage": 3, "world": world, "offload_params": False, "offload_optimizer": False,
                     "settings": {"stage3_max_reuse_distance": 0, "reduce_bucket_size": N,
                                  "stage3_param_persistence_threshold": 1e5, "sub_group_size": sub_group}}}
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        return Simulation(spec, job, emulation, tracker).run([4])[0]


def test_with_the_optimizer_on_the_gpu_each_rank_holds_its_fp32_share_states_and_gradient_share():
    """Four ranks: a quarter of the four matrices in bf16 (the partitions), in fp32 (the share the
    optimizer steps) with AdamW's two fp32 states, and in bf16 again (the gradients' share, held from
    start-up); until the first step, the fp32 gradient buffer of the largest sub-group; the same gather
    and release order as with the optimizer offloaded."""
    run = _on_gpu(4, 1e9)
    share = 4 * N // 4
    steady, first = run["steady_state"], run["first_step"]
    assert steady["breakdown"]["optimizer"] == 12 * share  # fp32 share + exp_avg + exp_avg_sq
    held = MATRIX + 2 * share + 4 * share + 2 * share  # bucket, partitions, fp32 share, gradients' share
    assert first["stage_peaks"]["setup"] == pytest.approx(held + 4 * share, abs=16 * 1024)
    assert steady["stage_peaks"]["setup"] == pytest.approx(held + 8 * share, abs=16 * 1024)  # the states
    # At the step: the flattened bf16 gradients of a sub-group and their fp32 cast; smaller sub-groups,
    # a smaller cast (and foreach temporaries of one sub-group at a time).
    whole, halves = steady["stage_peaks"]["optimizer"], _on_gpu(4, share / 2)["steady_state"]["stage_peaks"]["optimizer"]
    assert whole - halves >= (2 + 4) * share / 2
