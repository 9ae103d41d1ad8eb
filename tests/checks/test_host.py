from dataclasses import replace

from gpudoc.checks._common import CheckContext
from gpudoc.checks.host import check_disk, check_ram_offload, check_shm
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from gpudoc.units import GIB, MIB
from tests.checks._real import A5000, HOST, profile, snap

CTX = CheckContext()


def facts(**host):
    return snap(A5000, host=replace(HOST, **host))


def test_docker_default_shm_warns_and_fails_for_several_ranks():
    f = check_shm(facts(shm_total_bytes=64 * MIB, shm_free_bytes=64 * MIB, in_container=True), EMPTY, CTX)
    assert f.severity is Severity.WARN and "--shm-size=16g" in f.remedy
    f = check_shm(facts(shm_total_bytes=64 * MIB, in_container=True), profile(launch={"nproc_per_node": 4}), CTX)
    assert f.severity is Severity.FAIL and f.affects == ("/dev/shm",)
    f = check_shm(facts(shm_total_bytes=512 * MIB, in_container=False), EMPTY, CTX)
    assert f.remedy == "sudo mount -o remount,size=16G /dev/shm"


def test_shm_ok_and_nearly_full():
    assert check_shm(facts(), EMPTY, CTX).severity is Severity.OK
    f = check_shm(facts(shm_total_bytes=32 * GIB, shm_free_bytes=100 * MIB), EMPTY, CTX)
    assert f.severity is Severity.WARN and "nearly full" in f.title


def test_ram_offload_needs_a_profile_that_offloads():
    assert check_ram_offload(facts(), EMPTY, CTX).severity is Severity.SKIP
    assert check_ram_offload(facts(), profile(train={"offload_optimizer": False}), CTX).severity is Severity.SKIP


def test_ram_offload_of_a_7b_adamw_model_on_a_48_gib_host_fails():
    prof = profile(train={"offload_optimizer": True, "offload_params": True, "optimizer": "adamw"},
                   model={"params": 7e9})
    f = check_ram_offload(facts(), prof, CTX)
    # 7e9 x (16 + 2) bytes = 117.3 GiB > 48 GiB available.
    assert f.severity is Severity.FAIL
    assert "117.3 GiB" in f.title and "48.0 GiB available" in f.title
    assert f.remedy.startswith("offload_params = false in [train] of job")


def test_ram_offload_of_a_1b_model_fits():
    prof = profile(train={"offload_optimizer": True}, model={"params": 1.24e9})
    assert check_ram_offload(facts(), prof, CTX).severity is Severity.OK


def test_disk():
    assert check_disk(facts(), EMPTY, CTX).severity is Severity.OK
    f = check_disk(facts(runs_dir_free_bytes=50 * MIB), EMPTY, CTX)
    assert f.severity is Severity.FAIL and f.remedy.startswith("export GPUDOC_HOME=")
    assert check_disk(facts(runs_dir_free_bytes=1 * GIB), EMPTY, CTX).severity is Severity.WARN
    assert check_disk(facts(runs_dir_free_bytes=None), EMPTY, CTX).severity is Severity.SKIP
