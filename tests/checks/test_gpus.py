from dataclasses import replace

import pytest

from gpudoc.checks._common import CheckContext, parse_gpu_list, visibility
from gpudoc.checks.gpus import check_compute_mode, check_mig, check_persistence, check_visible
from gpudoc.errors import UsageError
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A100_MIG, A5000, EIGHT_1080, H100_MIG_CSV, T4, only, profile, snap

CTX = CheckContext()


def test_all_visible_no_profile_is_ok():
    [f] = check_visible(snap(A5000), EMPTY, CTX)
    assert f.severity is Severity.OK and f.title.startswith("2 GPU(s) visible (0,1)")


def test_empty_cuda_visible_devices_hides_everything():
    [f] = check_visible(snap(A5000, env={"CUDA_VISIBLE_DEVICES": ""}), EMPTY, CTX)
    assert f.severity is Severity.FAIL
    assert f.remedy == "export CUDA_VISIBLE_DEVICES=0,1"
    assert f.affects == ("CUDA_VISIBLE_DEVICES",)


def test_profile_needs_more_gpus_than_visible():
    facts = snap(EIGHT_1080, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    findings = check_visible(facts, profile(launch={"nproc_per_node": 4}), CTX)
    f = only(findings, Severity.FAIL)
    assert f.title == "the profile needs 4 GPUs per node, 2 visible"
    # The four GPUs with the most free memory in the capture: 3 (3.1 GiB), 4 (5.1), 7 (3.3) and 1 (395 MiB).
    assert f.remedy == "export CUDA_VISIBLE_DEVICES=1,3,4,7"


def test_profile_needs_more_gpus_than_the_machine_has():
    findings = check_visible(snap(A5000), profile(gpu={"count": 4}), CTX)
    f = only(findings, Severity.FAIL)
    assert f.remedy == "nproc_per_node = 2 in [launch] of job"


def test_uuid_entries_and_a_bad_entry_that_hides_the_rest():
    facts = snap(A5000, env={"CUDA_VISIBLE_DEVICES": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd,7,0"})
    vis = visibility(facts, facts.env)
    assert [g.index for g in vis.gpus] == [1] and vis.count == 1
    findings = check_visible(facts, profile(launch={"nproc_per_node": 2}), CTX)
    warn = next(f for f in findings if f.severity is Severity.WARN)
    assert "'7' matches no GPU" in warn.title and "1 entries after it" in warn.title
    assert only(findings, Severity.FAIL).title == "the profile needs 2 GPUs per node, 1 visible"


def test_ambiguous_uuid_prefix_matches_nothing():
    facts = snap(A5000, env={"CUDA_VISIBLE_DEVICES": "GPU-12345678"})
    assert visibility(facts, facts.env).hidden_all


def test_more_visible_than_needed_pins_the_freest():
    findings = check_visible(snap(A5000), profile(launch={"nproc_per_node": 1}), CTX)
    f = only(findings, Severity.INFO)
    assert f.remedy == "export CUDA_VISIBLE_DEVICES=1"  # GPU 1 has 6.7 GiB free, GPU 0 1.6 GiB
    # Unpinned, rank 0 would take GPU 0: the title says so and names the freer one.
    assert f.title == "2 GPUs visible, the job uses 1: ranks take GPU 0; the freest are 1"


def test_remedy_goes_into_the_profile_when_the_profile_set_the_variable():
    p = profile(launch={"nproc_per_node": 2}, env={"CUDA_VISIBLE_DEVICES": "0"})
    f = only(check_visible(snap(A5000), p, CTX), Severity.FAIL)
    assert f.remedy == 'CUDA_VISIBLE_DEVICES = "0,1" in [env] of job'


def test_duplicates_warn():
    findings = check_visible(snap(A5000, env={"CUDA_VISIBLE_DEVICES": "0,0"}), EMPTY, CTX)
    assert "twice" in only(findings, Severity.WARN).title


def test_mixed_models_need_pci_bus_order():
    facts = snap(A5000, env={"CUDA_VISIBLE_DEVICES": "1"})
    facts = replace(facts, gpus=(facts.gpus[0], replace(facts.gpus[1], name="NVIDIA RTX A4000")))
    f = only(check_visible(facts, EMPTY, CTX), Severity.WARN)
    assert f.remedy == "export CUDA_DEVICE_ORDER=PCI_BUS_ID"


def test_parse_gpu_list():
    assert parse_gpu_list("0,2") == (0, 2)
    assert parse_gpu_list("0-3") == (0, 1, 2, 3)
    assert parse_gpu_list("all") == ()
    with pytest.raises(UsageError, match="'x' is not a GPU index"):
        parse_gpu_list("0,x")


def test_mig_without_a_mig_uuid_warns():
    findings = check_mig(snap(A100_MIG), EMPTY, CTX)
    f = only(findings, Severity.WARN)
    assert "4 MIG instance(s): 19.5 GiB" in f.detail
    assert f.affects == ("gpu:0",)
    assert "CUDA_VISIBLE_DEVICES=MIG-" in f.remedy


def test_mig_with_several_ranks_per_node_warns_about_ranks():
    findings = check_mig(snap(H100_MIG_CSV), profile(launch={"nproc_per_node": 2}), CTX)
    ranks = next(f for f in findings if "each rank" in f.title)
    assert ranks.severity is Severity.WARN and "-mig 0" in ranks.remedy


def test_no_mig_is_ok():
    assert check_mig(snap(T4), EMPTY, CTX)[0].severity is Severity.OK


def test_exclusive_process_gpu_in_use_fails():
    facts = snap(T4)
    facts = replace(facts, gpus=(replace(facts.gpus[0], compute_mode="Exclusive_Process"),))
    f = only(check_compute_mode(facts, EMPTY, CTX), Severity.FAIL)
    assert "675, 5762" in f.title and "gpudoc clean --gpus 0" in f.remedy


def test_prohibited_gpu_fails():
    facts = snap(A5000)
    facts = replace(facts, gpus=(replace(facts.gpus[0], compute_mode="Prohibited"), facts.gpus[1]))
    f = only(check_compute_mode(facts, EMPTY, CTX), Severity.FAIL)
    assert f.remedy == "sudo nvidia-smi -i 0 -c DEFAULT"


def test_default_compute_mode_ok():
    assert check_compute_mode(snap(A5000), EMPTY, CTX)[0].title == "compute mode Default"


def test_persistence_off_is_info_with_command():
    f = check_persistence(snap(T4), EMPTY, CTX)
    assert f.severity is Severity.INFO and f.remedy.startswith("sudo nvidia-smi -i 0 -pm 1")
    assert check_persistence(snap(A5000), EMPTY, CTX).severity is Severity.OK
