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
