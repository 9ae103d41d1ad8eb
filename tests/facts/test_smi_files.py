"""Every real capture in tests/fixtures/real/nvidia-smi/ read into Facts.

The expected values were read off each file by eye (see the comments quoting the lines); they are
not computed with the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoc.errors import InputError
from gpudoc.facts.model import Facts
from gpudoc.facts.smi_files import load_snapshot
from tests.conftest import NVIDIA_SMI

MIB = 1024**2
CAP = "nvidia_gpu_exporter__internal__captures__"
TG = "telegraf__plugins__inputs__nvidia_smi__testdata__"


def snap(*names: str) -> Facts:
    return load_snapshot([NVIDIA_SMI / n for n in names])


def pids(gpu) -> list[int]:
    return [p.pid for p in gpu.processes]


def mem(gpu) -> dict[int, int | None]:
    return {p.pid: p.used_memory_bytes for p in gpu.processes}


def test_every_fixture_is_covered_by_a_test_here():
    # A new capture dropped into the folder must get its own assertions.
    source = Path(__file__).read_text()
    for path in NVIDIA_SMI.iterdir():
        short = path.name.replace(CAP, "").replace(TG, "")
        assert short in source, f"no test names {path.name}"


# ------------------------------------------------------------------------------------------
# nvidia-smi -q -x


def test_xml_a100_v12_mig_enabled_with_four_mig_devices():
    facts = snap(TG + "a100-sxm4-v12.xml")
    assert facts.driver_version == "535.54.03"
    assert facts.cuda_driver_version == "12.2"
    assert len(facts.gpus) == 1  # attached_gpus says 4, the file holds one <gpu>
    gpu = facts.gpus[0]
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.bus_id == "00000000:01:00.0"
    assert gpu.memory_total_bytes == 81920 * MIB
    assert gpu.memory_used_bytes == 50 * MIB
    assert gpu.memory_free_bytes == 80999 * MIB
    assert gpu.mig["enabled"] is True
    devices = gpu.mig["devices"]
    assert [d["gpu_instance_id"] for d in devices] == [3, 4, 5, 6]
    assert all(d["memory_total_bytes"] == 19968 * MIB for d in devices)
    assert all(d["memory_used_bytes"] == 12 * MIB for d in devices)
    assert all(d["memory_free_bytes"] == 19955 * MIB for d in devices)
    assert gpu.processes == ()  # <processes />
    assert gpu.ecc_mode == "Enabled"
    assert gpu.ecc_errors_corrected == 0 and gpu.ecc_errors_uncorrected == 0
    assert gpu.utilization_gpu_percent is None  # N/A under MIG
    assert "N/A" in gpu.unavailable["utilization_gpu_percent"]
    assert gpu.temperature_c == 27
    assert gpu.persistence_mode == "Disabled"
    assert gpu.throttle_reasons == ()


def test_xml_tesla_t4_v11_two_processes():
    facts = snap(TG + "tesla-t4.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("515.105.01", "11.7")
    (gpu,) = facts.gpus
    assert gpu.name == "Tesla T4"
    assert gpu.bus_id == "00000000:00:1E.0"
    assert gpu.memory_total_bytes == 15360 * MIB
    assert gpu.memory_used_bytes == 1032 * MIB
    assert gpu.memory_free_bytes == 13939 * MIB
    assert pids(gpu) == [675, 5762]
    assert mem(gpu) == {675: 22 * MIB, 5762: 1005 * MIB}
    assert [p.type for p in gpu.processes] == ["G", "C"]
    assert [p.name for p in gpu.processes] == ["/usr/lib/xorg/Xorg", "python"]
    assert gpu.retired_pages_pending is False  # <pending_retirement>No
    assert gpu.ecc_mode == "Enabled"
    assert gpu.mig is None


def test_xml_rtx3080_v12_wddm_five_graphics_processes():
    facts = snap(TG + "rtx-3080-v12.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("536.40", "12.2")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA GeForce RTX 3080"
    assert gpu.memory_total_bytes == 10240 * MIB
    assert gpu.memory_used_bytes == 1128 * MIB
    assert pids(gpu) == [835, 1481, 2214, 4044, 42416]
    assert {p.type for p in gpu.processes} == {"G"}
    assert mem(gpu)[835] == 550 * MIB and mem(gpu)[42416] == 159 * MIB
    assert gpu.persistence_mode is None
    assert "N/A" in gpu.unavailable["persistence_mode"]


def test_xml_quadro_p400_without_doctype():
    facts = snap(TG + "quadro-p400.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("418.43", "10.1")
    (gpu,) = facts.gpus
    assert gpu.name == "Quadro P400"
    assert gpu.uuid == "GPU-8f750be4-dfbc-23b9-b33f-da729a536494"
    assert gpu.memory_total_bytes == 1998 * MIB
    assert gpu.memory_used_bytes == 0
    assert gpu.processes == ()  # empty <processes>
    assert gpu.mig is None and "mig" in gpu.unavailable  # 2019 layout: no MIG elements
    assert gpu.ecc_errors_corrected is None  # single_bit/total N/A


def test_xml_gtx1070ti_v10_trimmed_without_driver_or_processes():
    facts = snap(TG + "gtx-1070-ti.xml")
    assert facts.driver_version is None and facts.cuda_driver_version is None
    (gpu,) = facts.gpus
    assert gpu.name == "GeForce GTX 1070 Ti"
    assert gpu.memory_total_bytes == 4096 * MIB
    assert gpu.memory_used_bytes == 42 * MIB
    assert gpu.memory_free_bytes == 4054 * MIB
    assert gpu.temperature_c == 39
    assert gpu.processes is None  # no <processes> element at all: unknown, not "none"
    assert "processes" in gpu.unavailable


def test_xml_rtx3060_v12_tab_indented():
    facts = snap(TG + "rtx-3060-v12.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("570.124.04", "12.8")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA GeForce RTX 3060"
    assert gpu.memory_total_bytes == 12288 * MIB
    assert gpu.memory_used_bytes == 116 * MIB
    assert gpu.memory_free_bytes == 11806 * MIB
    assert gpu.processes == ()
    assert gpu.throttle_reasons == ()  # only gpu_idle is Active, and that is no throttle


def test_xml_quadro_p2000_v12():
    facts = snap(TG + "quadro-p2000-v12.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("525.125.06", "12.0")
    (gpu,) = facts.gpus
    assert gpu.name == "Quadro P2000"
    assert gpu.bus_id == "00000000:17:00.0"
    assert gpu.memory_total_bytes == 5120 * MIB
    assert gpu.memory_used_bytes == 1 * MIB
    assert gpu.memory_free_bytes == 5051 * MIB
    assert gpu.persistence_mode == "Enabled"
    assert gpu.temperature_c == 34


def test_xml_dual_a5000_v13_same_pid_on_both_gpus():
    facts = snap(TG + "dual_a5000-v13.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("590.44.01", "13.1")
    assert len(facts.gpus) == 2
    first, second = facts.gpus
    assert (first.index, second.index) == (0, 1)  # file order, not minor_number (1 then 0)
    assert first.bus_id == "00000000:81:00.0" and second.bus_id == "00000000:C1:00.0"
    assert first.memory_total_bytes == second.memory_total_bytes == 24564 * MIB
    assert first.memory_used_bytes == 22437 * MIB
    assert first.memory_free_bytes == 1678 * MIB
    assert mem(first) == {100477: 22430 * MIB}
    assert mem(second) == {100477: 17246 * MIB}
    assert first.processes[0].name == "/root/src/llama.cpp/build/bin/llama-server"
    assert first.processes[0].gpu_instance_id is None  # N/A outside MIG
    assert first.ecc_mode == "Disabled"
    assert first.mig is None


def test_xml_pro6000_blackwell_v13():
    facts = snap(TG + "pro-6000-maxq-blackwell-v13.xml")
    assert (facts.driver_version, facts.cuda_driver_version) == ("590.44.01", "13.1")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert gpu.memory_total_bytes == 97887 * MIB
    assert gpu.memory_used_bytes == 65720 * MIB
    assert gpu.memory_free_bytes == 31531 * MIB
    assert mem(gpu) == {116860: 65710 * MIB}


# ------------------------------------------------------------------------------------------
# the plain table


def test_table_2018_old_layout_eight_gpus_thirteen_processes():
    facts = snap("nvidia-htop__test__FAKE_STDIN.txt")
    assert facts.driver_version == "390.25"
    assert facts.cuda_driver_version is None  # the 79-column header has no CUDA Version
    assert len(facts.gpus) == 8
    assert all(g.name == "GeForce GTX 108..." for g in facts.gpus)  # truncated by nvidia-smi
    assert all(g.memory_total_bytes == 11178 * MIB for g in facts.gpus)
    assert [g.memory_used_bytes // MIB for g in facts.gpus] == [10807, 10783, 10793, 7996, 5964, 10785, 10823, 7773]
    assert facts.gpus[4].bus_id == "00000000:84:00.0"
    assert sum(len(g.processes) for g in facts.gpus) == 13
    assert pids(facts.gpus[3]) == [4755, 14518]
    assert pids(facts.gpus[4]) == [13956, 14293, 14294, 14295]
    matlab = facts.gpus[3].processes[0]
    assert matlab.name == "...ware/MATLAB/matlab94/bin/glnxa64/MATLAB"
    assert matlab.used_memory_bytes == 389 * MIB
    assert mem(facts.gpus[6]) == {11527: 10221 * MIB, 27159: 577 * MIB}
    assert facts.gpus[1].utilization_gpu_percent == 100
    assert facts.gpus[1].temperature_c == 83
    assert facts.gpus[0].compute_mode == "Default"
    assert facts.gpus[0].persistence_mode == "Disabled"


def test_table_container_memory_used_but_no_processes():
    facts = snap("nvidia-htop__test__FAKE_STDIN_NO_PROCESSES_DOCKER.txt")
    assert (facts.driver_version, facts.cuda_driver_version) == ("440.82", "10.2")
    assert len(facts.gpus) == 2
    assert facts.gpus[0].memory_used_bytes == 10916 * MIB
    assert facts.gpus[0].memory_total_bytes == 11175 * MIB
    assert facts.gpus[1].memory_used_bytes == 149 * MIB
    # An empty Processes table is an answer (none visible here), not "unknown".
    assert facts.gpus[0].processes == () and facts.gpus[1].processes == ()


def test_table_h100_mig_devices_and_gi_ci_columns():
    facts = snap(CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__nvidia-smi.txt")
    assert (facts.driver_version, facts.cuda_driver_version) == ("590.48.01", "13.1")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_total_bytes == 81559 * MIB
    assert gpu.memory_used_bytes == 11125 * MIB
    assert gpu.utilization_gpu_percent is None  # N/A under MIG
    assert gpu.mig["enabled"] is True
    assert [(d["gpu_instance_id"], d["compute_instance_id"]) for d in gpu.mig["devices"]] == [
        (2, 0), (3, 0), (9, 0), (10, 0)]
    assert gpu.mig["devices"][0]["memory_used_bytes"] == 11091 * MIB
    assert gpu.mig["devices"][0]["memory_total_bytes"] == 40448 * MIB
    assert gpu.mig["devices"][1]["memory_total_bytes"] == 20096 * MIB
    assert mem(gpu) == {21180: 2296 * MIB, 21181: 1272 * MIB, 21198: 7484 * MIB}
    assert {(p.gpu_instance_id, p.compute_instance_id) for p in gpu.processes} == {(2, 0)}
    assert gpu.persistence_mode == "Enabled"


def test_table_h200_mig_two_compute_instances_in_one_gpu_instance():
    facts = snap(CAP + "linux-x86_64__nvidia-h200-mig__590.48.01__load__nvidia-smi.txt")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA H200"
    assert gpu.memory_total_bytes == 143771 * MIB
    assert gpu.memory_used_bytes == 16959 * MIB
    assert len(gpu.mig["devices"]) == 5
    assert [(d["gpu_instance_id"], d["compute_instance_id"]) for d in gpu.mig["devices"][:2]] == [(2, 0), (2, 1)]
    assert mem(gpu) == {12249: 2194 * MIB, 12250: 1170 * MIB, 12267: 13526 * MIB}
    assert {(p.gpu_instance_id, p.compute_instance_id) for p in gpu.processes} == {(2, 1)}


def test_table_h200_without_mig():
    facts = snap(CAP + "linux-x86_64__nvidia-h200__590.48.01__load__nvidia-smi.txt")
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == 143771 * MIB
    assert gpu.memory_used_bytes == 32362 * MIB
    assert gpu.utilization_gpu_percent == 100
    assert gpu.mig == {"enabled": False, "devices": []}
    assert gpu.ecc_errors_uncorrected == 0  # "Volatile Uncorr. ECC" column shows 0
    assert mem(gpu) == {10291: 2566 * MIB, 10293: 1542 * MIB, 10309: 28234 * MIB}
    assert gpu.processes[2].name == "./gpu_burn"
    assert gpu.processes[0].gpu_instance_id is None


def test_table_l40s_two_ffmpeg():
    facts = snap(CAP + "linux-x86_64__nvidia-l40s__595.80__load__nvidia-smi.txt")
    assert (facts.driver_version, facts.cuda_driver_version) == ("595.80", "13.2")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA L40S"
    assert gpu.memory_total_bytes == 46068 * MIB
    assert gpu.memory_used_bytes == 1235 * MIB
    assert gpu.persistence_mode == "Disabled"
    assert gpu.mig is None  # MIG M. column says N/A
    assert mem(gpu) == {20037: 538 * MIB, 20038: 681 * MIB}


def test_table_windows_wddm_memory_not_available():
    facts = snap(CAP + "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__load__nvidia-smi.txt")
    assert (facts.driver_version, facts.cuda_driver_version) == ("591.86", "13.1")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA GeForce RTX 2080 ..."
    assert gpu.memory_total_bytes == 8192 * MIB
    assert gpu.memory_used_bytes == 1296 * MIB
    assert gpu.persistence_mode is None  # "Driver-Model" column: WDDM
    assert len(gpu.processes) == 12
    assert all(p.used_memory_bytes is None for p in gpu.processes)
    assert pids(gpu)[:3] == [2056, 4680, 12332]
    assert gpu.processes[0].name == r"C:\Windows\System32\dwm.exe"
    assert [p.type for p in gpu.processes].count("C+G") == 10
    assert gpu.processes[-1].type == "C"


def test_whole_capture_with_several_tables_is_refused_with_the_file_name():
    path = NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-h100-mig__590.48.01.txt")
    with pytest.raises(InputError) as err:
        load_snapshot([path])
    assert str(path) in str(err.value)
    assert "2 nvidia-smi tables" in str(err.value)


# ------------------------------------------------------------------------------------------
# CSV


def test_query_gpu_csv_header_units_values_without_units_p100():
    facts = snap("netdata__src__go__plugin__go.d__modules__nvidia_smi__testdata__tesla-p100.csv")
    (gpu,) = facts.gpus
    assert gpu.name == "Tesla P100-PCIE-16GB"
    assert gpu.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert gpu.memory_used_bytes == 0
    assert gpu.memory_free_bytes == 16280 * MIB
    # no memory.total column: reserved 103 + used 0 + free 16280
    assert gpu.memory_total_bytes == 16383 * MIB
    assert gpu.temperature_c == 37
    assert gpu.processes is None  # query-gpu lists no processes


def test_query_gpu_csv_h100_mig_212_columns():
    facts = snap(CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__query-gpu.csv")
    assert facts.driver_version == "590.48.01"
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.bus_id == "00000000:00:09.0"
    assert gpu.memory_total_bytes == 81559 * MIB
    assert gpu.memory_used_bytes == 11125 * MIB
    assert gpu.memory_free_bytes == 69956 * MIB
    assert gpu.utilization_gpu_percent is None  # [N/A]
    assert gpu.mig["enabled"] is True
    assert gpu.compute_capability == "9.0"
    assert gpu.ecc_mode == "Enabled"
    assert gpu.temperature_c == 53
    assert gpu.throttle_reasons == ()


def test_query_gpu_csv_h200():
    facts = snap(CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv")
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == 143771 * MIB
    assert gpu.memory_used_bytes == 32362 * MIB
    assert gpu.memory_free_bytes == 110796 * MIB
    assert gpu.utilization_gpu_percent == 100
    assert gpu.utilization_memory_percent == 7
    assert gpu.mig["enabled"] is False
    assert gpu.persistence_mode == "Enabled"


def test_compute_apps_csv_alone_h100():
    facts = snap(CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__query-compute-apps.csv")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.bus_id == "00000000:00:09.0"
    assert gpu.memory_total_bytes is None
    assert mem(gpu) == {21180: 2296 * MIB, 21181: 1272 * MIB, 21198: 7484 * MIB}


def test_compute_apps_csv_merges_into_query_gpu_h200():
    facts = snap(CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv",
                 CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-compute-apps.csv")
    assert len(facts.gpus) == 1  # one GPU, not a second one made from the process rows
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == 143771 * MIB
    assert mem(gpu) == {10291: 2566 * MIB, 10293: 1542 * MIB, 10309: 28234 * MIB}
    assert "processes" not in gpu.unavailable
    assert facts.source == ("snapshot:" + CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv,"
                            + CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-compute-apps.csv")


def test_compute_apps_csv_merges_into_table_l40s():
    facts = snap(CAP + "linux-x86_64__nvidia-l40s__595.80__load__nvidia-smi.txt",
                 CAP + "linux-x86_64__nvidia-l40s__595.80__load__query-compute-apps.csv")
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == 46068 * MIB
    assert pids(gpu) == [20037, 20038]  # the same PIDs are not listed twice


def test_compute_apps_csv_windows_paths_and_na_memory():
    facts = snap(CAP + "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__load__query-compute-apps.csv")
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA GeForce RTX 2080 SUPER"
    assert len(gpu.processes) == 12
    assert all(p.used_memory_bytes is None for p in gpu.processes)  # [N/A]
    by_pid = {p.pid: p.name for p in gpu.processes}
    assert by_pid[20372] == r"C:\Program Files\NZXT CAM\NZXT CAM.exe"
    assert by_pid[2056] == r"C:\Windows\System32\dwm.exe"


IDLE_APPS = CAP + "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__idle__query-compute-apps.csv"


def test_compute_apps_csv_header_only_alone_holds_no_gpu_facts():
    # An idle machine's capture: the header and no rows. Read as "no GPU" it failed the driver check.
    with pytest.raises(InputError) as err:
        snap(IDLE_APPS)
    assert str(err.value).startswith(f"{NVIDIA_SMI / IDLE_APPS}: a --query-compute-apps capture without "
                                     "process rows holds no GPU facts")
    assert "--query-gpu" in str(err.value) and err.value.file == str(NVIDIA_SMI / IDLE_APPS)


def test_compute_apps_csv_header_only_with_a_gpu_capture_means_no_processes():
    facts = snap(CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv", IDLE_APPS)
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == 143771 * MIB
    assert gpu.processes == ()  # the rows list every compute process: none


def test_masked_uuid_with_one_gpu_still_matches_by_bus_id(tmp_path):
    # Both captures mask the UUID to GPU-00000000-...; the bus id decides.
    facts = snap(CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__query-gpu.csv",
                 CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__query-compute-apps.csv")
    assert len(facts.gpus) == 1
    assert mem(facts.gpus[0])[21198] == 7484 * MIB


def test_process_rows_without_bus_id_on_a_masked_single_gpu_capture(tmp_path):
    apps = tmp_path / "apps.csv"
    apps.write_text("pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
                    "777, python, GPU-00000000-0000-0000-0000-000000000000, 100 MiB\n")
    facts = load_snapshot([NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv"), apps])
    assert len(facts.gpus) == 1
    assert mem(facts.gpus[0]) == {777: 100 * MIB}


# ------------------------------------------------------------------------------------------
# gpudoc JSON and bad input


def test_gpudoc_json_round_trip_whole_document_and_facts_alone(tmp_path):
    original = snap(TG + "dual_a5000-v13.xml")
    whole = tmp_path / "check.json"
    whole.write_text(json.dumps({"schema_version": 1, "command": "check", "facts": original.to_dict(),
                                 "findings": []}))
    alone = tmp_path / "facts.json"
    alone.write_text(json.dumps(original.to_dict()))
    for path in (whole, alone):
        back = load_snapshot([path])
        assert back.gpus == original.gpus
        assert back.driver_version == "590.44.01"
        assert back.source == f"snapshot:{path.name}"
        assert back.to_dict()["gpus"] == original.to_dict()["gpus"]


def test_unrecognised_file_names_the_file(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not nvidia-smi\n")
    with pytest.raises(InputError) as err:
        load_snapshot([bad])
    assert str(err.value).startswith(f"{bad}: not a recognised nvidia-smi output (expected")


@pytest.mark.parametrize("content, fragment", [
    ("", "empty"),
    ("<nvidia_smi_log><gpu>", "not well-formed XML"),
    ("<html></html>", "<html>"),
    ("{not json", "not valid JSON"),
    ('{"hello": 1}', "without gpudoc facts"),
])
def test_bad_files_raise_input_error_naming_the_file(tmp_path, content, fragment):
    bad = tmp_path / "bad.out"
    bad.write_text(content)
    with pytest.raises(InputError) as err:
        load_snapshot([bad])
    assert str(bad) in str(err.value) and fragment in str(err.value)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_snapshot([tmp_path / "absent.xml"])


def test_utf16_file_from_powershell_is_read(tmp_path):
    source = NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-l40s__595.80__load__nvidia-smi.txt")
    utf16 = tmp_path / "smi.txt"
    utf16.write_bytes(source.read_text().encode("utf-16"))
    assert load_snapshot([utf16]).gpus[0].memory_total_bytes == 46068 * MIB


def test_masked_uuids_on_several_gpus_do_not_merge_them(tmp_path):
    # Captures masked like nvidia_gpu_exporter's, on a two-GPU box: same UUID, different bus ids.
    masked = "GPU-00000000-0000-0000-0000-000000000000"
    gpus = tmp_path / "gpus.csv"
    gpus.write_text("index, name, uuid, pci.bus_id, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
                    f"0, NVIDIA H200, {masked}, 00000000:83:00.0, 143771 MiB, 32362 MiB, 110796 MiB\n"
                    f"1, NVIDIA H200, {masked}, 00000000:84:00.0, 143771 MiB, 0 MiB, 143158 MiB\n")
    apps = tmp_path / "apps.csv"
    apps.write_text("gpu_bus_id, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
                    f"00000000:84:00.0, {masked}, 42, python, 10 MiB\n")
    facts = load_snapshot([gpus, apps])
    assert len(facts.gpus) == 2
    assert facts.gpus[0].processes == ()
    assert mem(facts.gpus[1]) == {42: 10 * MIB}


def test_a_csv_with_carriage_returns_is_read_line_by_line(tmp_path):
    # Found by the CLI fuzz: csv.reader over one string raised on a lone "\r" inside a field.
    source = NVIDIA_SMI / "netdata__src__go__plugin__go.d__modules__nvidia_smi__testdata__tesla-p100.csv"
    text = source.read_text()
    windows = tmp_path / "windows.csv"
    windows.write_text(text.replace("\n", "\r\n"), newline="")
    assert load_snapshot([windows]).gpus[0].memory_used_bytes == load_snapshot([source]).gpus[0].memory_used_bytes
    stray = tmp_path / "stray.csv"
    stray.write_text(text.replace("P0, ", "P0,\r", 1), newline="")
    try:
        load_snapshot([stray])  # a line cut in two: read as what it is, or refused, never a crash
    except InputError as exc:
        assert str(stray) in str(exc)


# ------------------------------------------------------------------------------------------
# gpudoc JSON with values of the wrong type, and sizes no GPU reports


def _edited_check_json(tmp_path: Path, edit) -> Path:
    """A real capture saved as `check --json` would save it, then edited by hand."""
    doc = {"schema_version": 1, "command": "check", "facts": snap(TG + "dual_a5000-v13.xml").to_dict(),
           "findings": []}
    edit(doc["facts"])
    path = tmp_path / "check.json"
    path.write_text(json.dumps(doc))
    return path


def _set(*keys, value):
    def edit(facts):
        target = facts
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set("gpus", 0, "memory_total_bytes", value="x"), 'facts.gpus[0].memory_total_bytes: expected an integer, got "x"'),
    (_set("gpus", 0, "index", value=None), "facts.gpus[0].index: expected an integer, got null"),
    (_set("gpus", 1, "mig", value="yes"), 'facts.gpus[1].mig: expected an object or null, got "yes"'),
    (_set("gpus", 0, "processes", 0, "pid", value="abc"), 'facts.gpus[0].processes[0].pid: expected an integer, got "abc"'),
    (_set("gpus", 0, "memory_used_bytes", value=True), "facts.gpus[0].memory_used_bytes: expected an integer, got true"),
    (_set("gpus", 0, "processes", value={}), "facts.gpus[0].processes: expected a list, got {}"),
    (_set("gpus", 0, "temperature_c", value="hot"), 'facts.gpus[0].temperature_c: expected a number, got "hot"'),
    (_set("gpus", 0, "mig", value={"enabled": "no"}), 'facts.gpus[0].mig.enabled: expected true or false, got "no"'),
    (_set("gpus", 0, "mig", value={"enabled": True, "devices": [{"index": 0, "memory_free_bytes": "1"}]}),
     'facts.gpus[0].mig.devices[0].memory_free_bytes: expected an integer, got "1"'),
    (_set("host", "cpu_count", value="8"), 'facts.host.cpu_count: expected an integer, got "8"'),
    (_set("env", value={"OMP_NUM_THREADS": 4}), "facts.env.OMP_NUM_THREADS: expected a string, got 4"),
    (_set("gpus", value=[1]), "facts.gpus[0]: expected an object, got 1"),
    (lambda facts: facts.pop("collected_at"), "facts.collected_at: missing"),
    (lambda facts: facts.pop("gpus"), "facts.gpus: missing"),
    (lambda facts: facts["gpus"][0].pop("index"), "facts.gpus[0].index: missing"),
])
def test_gpudoc_json_of_the_wrong_type_names_the_file_and_the_field(tmp_path, edit, message):
    path = _edited_check_json(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_snapshot([path])
    assert str(err.value).startswith(f"{path}: {message}")
    assert err.value.file == str(path) and err.value.key == message.split(":")[0]


def test_gpudoc_json_facts_alone_names_fields_without_the_facts_prefix(tmp_path):
    facts = snap(TG + "dual_a5000-v13.xml").to_dict()
    facts["gpus"][0]["memory_free_bytes"] = [1]
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    with pytest.raises(InputError, match=r"facts.json: gpus\[0\].memory_free_bytes: expected an integer, got \[1\]$"):
        load_snapshot([path])


def test_gpudoc_json_with_a_facts_value_that_is_not_an_object(tmp_path):
    path = tmp_path / "check.json"
    path.write_text('{"facts": [1, 2]}')
    with pytest.raises(InputError, match=r"check.json: facts: expected an object, got \[1, 2\]$"):
        load_snapshot([path])


@pytest.mark.parametrize("edit, message", [
    (_set("gpus", 0, "memory_total_bytes", value=-1), "facts.gpus[0].memory_total_bytes: -1 is negative"),
    (_set("gpus", 0, "memory_used_bytes", value=30 * 1024**3),
     "facts.gpus[0].memory_used_bytes: 32212254720 is more than the GPU's total (25757220864)"),
    (_set("gpus", 1, "memory_total_bytes", value=17 * 1024**4),
     "facts.gpus[1].memory_total_bytes: 18691697672192 is more than any GPU holds (16 TiB)"),
    (_set("gpus", 0, "processes", 0, "used_memory_bytes", value=-5),
     "facts.gpus[0].processes[0].used_memory_bytes: -5 is negative"),
])
def test_gpudoc_json_with_impossible_memory_names_the_field_and_value(tmp_path, edit, message):
    path = _edited_check_json(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_snapshot([path])
    assert str(err.value).startswith(f"{path}: {message}")


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A real capture with one value changed, as a mangled paste would change it."""
    text = (NVIDIA_SMI / name).read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


H200_CSV = CAP + "linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv"
L40S_TABLE = CAP + "linux-x86_64__nvidia-l40s__595.80__load__nvidia-smi.txt"


@pytest.mark.parametrize("name, old, new, message", [
    # query-gpu CSV: "-1 MiB" read as a size gave "only -1.0 MiB of -1.0 MiB free"
    (H200_CSV, " 143771 MiB", " -1 MiB", "GPU 0 memory total -1 MiB is negative"),
    # the plain table: 26 digits gave "90949470177292.8 EiB"
    (L40S_TABLE, "46068MiB", "99999999999999999999999999MiB",
     "GPU 0 memory total 999999... (26 digits) MiB is more than any GPU holds (16 TiB)"),
    (L40S_TABLE, "  1235MiB /", " 50000MiB /", "GPU 0 memory used 50000 MiB is more than the GPU's total (46068 MiB)"),
    # 400 digits overflowed a float into infinity: an internal error, not a message
    (H200_CSV, " 143771 MiB", " " + "9" * 400 + " MiB",
     "GPU 0 memory total 999999... (400 digits) MiB is more than any GPU holds"),
    (TG + "tesla-t4.xml", "<used_memory>1005 MiB</used_memory>", "<used_memory>-3 MiB</used_memory>",
     "GPU 0 process 5762 used memory -3 MiB is negative"),
])
def test_impossible_memory_in_nvidia_smi_output_is_refused_naming_file_and_value(tmp_path, name, old, new, message):
    path = _edited(tmp_path, name, old, new)
    with pytest.raises(InputError) as err:
        load_snapshot([path])
    assert str(err.value).startswith(f"{path}: {message}")


def test_impossible_process_memory_in_a_compute_apps_csv_is_refused(tmp_path):
    name = CAP + "linux-x86_64__nvidia-l40s__595.80__load__query-compute-apps.csv"
    text = (NVIDIA_SMI / name).read_text()
    path = tmp_path / "apps.csv"
    path.write_text(text.replace(" MiB", "0000000000000 MiB", 1))
    with pytest.raises(InputError, match=r"apps.csv: process \d+ used memory \d+ MiB is more than any GPU holds"):
        load_snapshot([path])
