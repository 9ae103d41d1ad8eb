"""`gpudoc check` through the real CLI (fresh interpreter), on the real nvidia-smi captures."""

import json
import subprocess
import sys

from tests.conftest import NVIDIA_SMI, REPO, gpudoc_cli

A5000 = str(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml")
T4 = str(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml")
H100_GPU = str(NVIDIA_SMI / "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-h100-mig__590.48.01__load__query-gpu.csv")
H100_APPS = str(NVIDIA_SMI / "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-h100-mig__590.48.01__load__query-compute-apps.csv")
CLEAN_ENV = {"TOKENIZERS_PARALLELISM": "false", "PYTORCH_ALLOC_CONF": "expandable_segments:True",
             "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": "0,1"}

ENVELOPE_KEYS = ["schema_version", "gpudoc_version", "command", "status", "exit_code", "facts", "findings", "summary"]
GPU_KEYS = {"index", "name", "uuid", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "mig", "processes"}


def test_json_envelope_contract():
    result = gpudoc_cli("check", "--snapshot", A5000, "--json", env=CLEAN_ENV)
    doc = json.loads(result.stdout)
    assert list(doc)[:8] == ENVELOPE_KEYS
    assert doc["schema_version"] == 1 and doc["command"] == "check"
    assert doc["status"] == "warn" and doc["exit_code"] == 0 == result.returncode
    gpu = doc["facts"]["gpus"][0]
    assert set(gpu) >= GPU_KEYS
    assert gpu["memory_total_bytes"] == 25757220864
    assert set(gpu["processes"][0]) >= {"pid", "used_memory_bytes", "name"}
    assert doc["facts"]["driver_version"] == "590.44.01" and doc["facts"]["cuda_driver_version"] == "13.1"
    for f in doc["findings"]:
        assert list(f) == ["id", "severity", "title", "detail", "remedy", "affects"]
    assert set(doc["summary"]) == {"ok", "info", "skip", "warn", "fail", "error"}
    assert sum(doc["summary"].values()) == len(doc["findings"])


def test_json_output_reads_back_as_a_snapshot(tmp_path):
    first = gpudoc_cli("check", "--snapshot", A5000, "--json")
    saved = tmp_path / "facts.json"
    saved.write_text(first.stdout)
    second = json.loads(gpudoc_cli("check", "--snapshot", str(saved), "--json").stdout)
    assert second["facts"]["gpus"] == json.loads(first.stdout)["facts"]["gpus"]


def test_text_output_groups_markers_and_verdict():
    result = gpudoc_cli("check", "--snapshot", A5000, env=CLEAN_ENV)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    for heading in ("Driver", "GPUs", "Processes", "Environment", "Host"):
        assert f"\n{heading}\n" in f"\n{out}"
    assert "driver 590.44.01, CUDA 13.1, 2 GPUs ..." in out
    assert out.rstrip().splitlines()[-1].startswith("READY, with warnings:")
    assert "\x1b[" not in out  # not a terminal (and NO_COLOR): no colour


def test_fail_exits_1_and_strict_makes_warnings_fail(isolated_home):
    # On the A5000 capture GPU 0 has 1.6 GiB free: a profile needing 4 GiB per GPU fails.
    (isolated_home / "gpudoc.toml").write_text("[gpu]\ncount = 2\nmin_free_gib = 4\n")
    fail = gpudoc_cli("check", "--snapshot", A5000, "--only", "gpu.free-memory", cwd=isolated_home)
    assert fail.returncode == 1, fail.stdout
    assert "FAIL" in fail.stdout
    (isolated_home / "gpudoc.toml").unlink()
    warn = gpudoc_cli("check", "--snapshot", A5000, "--only", "gpu.free-memory", cwd=isolated_home)
    assert warn.returncode == 0  # warnings only
    strict = gpudoc_cli("check", "--snapshot", A5000, "--only", "gpu.free-memory", "--strict", cwd=isolated_home)
    assert strict.returncode == 1


def test_profile_need_fails(tmp_path):
    (tmp_path / "gpudoc.toml").write_text('[gpu]\ncount = 2\nmin_free_gib = 4\n')
    result = gpudoc_cli("check", "--snapshot", A5000, "--only", "gpu", cwd=tmp_path)
    assert result.returncode == 1
    assert "GPU 0: 1.6 GiB free, the job needs 4.0 GiB (gpu.min_free_gib in gpudoc.toml)" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("NOT READY")


def test_only_skip_and_list_checks():
    listed = gpudoc_cli("check", "--list-checks")
    assert listed.returncode == 0
    ids = [line.split()[0] for line in listed.stdout.splitlines()]
    assert ids[0] == "driver.nvml" and "proc.stray" in ids and len(ids) == 18
    only = json.loads(gpudoc_cli("check", "--snapshot", T4, "--only", "gpu.ecc,host", "--json").stdout)
    assert {f["id"] for f in only["findings"]} == {"gpu.ecc", "host.shm", "host.ram-offload", "host.disk"}
    skipped = json.loads(gpudoc_cli("check", "--snapshot", T4, "--skip", "env", "--json").stdout)
    assert not [f for f in skipped["findings"] if f["id"].startswith("env.")]


def test_unknown_check_id_is_a_usage_error():
    result = gpudoc_cli("check", "--only", "gpu.free-mem")
    assert result.returncode == 2
    assert result.stderr.strip() == ("gpudoc: --only: unknown check 'gpu.free-mem' (did you mean 'gpu.free-memory'?); "
                                     "`gpudoc check --list-checks` lists them")


def test_gpus_switch_and_bad_index():
    result = json.loads(gpudoc_cli("check", "--snapshot", A5000, "--gpus", "1", "--only", "gpu.free-memory",
                                   "--json").stdout)
    assert [f["affects"] for f in result["findings"]] == [["gpu:1"]]
    bad = gpudoc_cli("check", "--snapshot", A5000, "--gpus", "7")
    assert bad.returncode == 2 and "no GPU 7 here (GPUs: 0, 1)" in bad.stderr


def test_two_snapshot_files_combine_gpus_and_processes():
    doc = json.loads(gpudoc_cli("check", "--snapshot", H100_GPU, "--snapshot", H100_APPS, "--only", "proc", "--json").stdout)
    [f] = doc["findings"]
    assert f["title"] == "GPU 0: 3 process(es) of the snapshot's machine hold 10.8 GiB"


def test_missing_driver_is_a_fail_not_a_crash():
    result = gpudoc_cli("check", "--json")  # this test machine has no NVIDIA driver
    doc = json.loads(result.stdout)
    nvml = next(f for f in doc["findings"] if f["id"] == "driver.nvml")
    if doc["facts"]["nvml_error"]:
        assert nvml["severity"] == "fail" and result.returncode == 1
        assert all(f["severity"] == "skip" for f in doc["findings"] if f["id"].startswith(("gpu.", "proc.")))
    else:  # a machine with a GPU
        assert nvml["severity"] == "ok"


def test_bad_snapshot_and_bad_profile_are_exit_2(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    result = gpudoc_cli("check", "--snapshot", str(junk))
    assert result.returncode == 2 and "junk.txt" in result.stderr and "Traceback" not in result.stderr
    result = gpudoc_cli("check", "-p", "no-such-profile")
    assert result.returncode == 2 and "unknown profile 'no-such-profile'" in result.stderr


IDLE_APPS = str(NVIDIA_SMI / "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__idle__query-compute-apps.csv")
H200_GPU = str(NVIDIA_SMI / "nvidia_gpu_exporter__internal__captures__linux-x86_64__nvidia-h200__590.48.01__load__query-gpu.csv")


def _one_line_exit_2(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == f"gpudoc: {message}"
    assert result.stdout == ""


def test_a_hand_edited_json_snapshot_is_one_line_naming_the_field_not_a_crash(tmp_path):
    doc = json.loads(gpudoc_cli("check", "--snapshot", A5000, "--json").stdout)
    for key, value, message in (
        ("memory_total_bytes", "x", 'facts.gpus[0].memory_total_bytes: expected an integer, got "x"'),
        ("index", None, "facts.gpus[0].index: expected an integer, got null"),
        ("mig", "yes", 'facts.gpus[0].mig: expected an object or null, got "yes"'),
        ("memory_free_bytes", -1, "facts.gpus[0].memory_free_bytes: -1 is negative"),
    ):
        edited = json.loads(json.dumps(doc))
        edited["facts"]["gpus"][0][key] = value
        path = tmp_path / "j.json"
        path.write_text(json.dumps(edited))
        _one_line_exit_2(gpudoc_cli("check", "--snapshot", str(path)), f"{path}: {message}")
    edited = json.loads(json.dumps(doc))
    edited["facts"]["gpus"][0]["processes"][0]["pid"] = "abc"
    path.write_text(json.dumps(edited))
    result = gpudoc_cli("check", "--snapshot", str(path), "--json")
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["file"] == str(path) and error["key"] == "facts.gpus[0].processes[0].pid"


def test_a_json_snapshot_with_facts_but_no_collected_at_says_so(tmp_path):
    doc = json.loads(gpudoc_cli("check", "--snapshot", A5000, "--json").stdout)
    del doc["facts"]["collected_at"]
    path = tmp_path / "j.json"
    path.write_text(json.dumps(doc))
    result = gpudoc_cli("check", "--snapshot", str(path))
    _one_line_exit_2(result, f"{path}: facts.collected_at: missing (every gpudoc facts document has it)")


def test_impossible_memory_sizes_are_bad_input(tmp_path):
    csv = tmp_path / "gpus.csv"
    csv.write_text("index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n0, X, -1 MiB, -1 MiB, -1 MiB\n")
    _one_line_exit_2(gpudoc_cli("check", "--snapshot", str(csv)), f"{csv}: GPU 0 memory total -1 MiB is negative")


def test_an_idle_compute_apps_capture_alone_is_bad_input_and_fine_with_a_gpu_capture():
    alone = gpudoc_cli("check", "--snapshot", IDLE_APPS)
    assert alone.returncode == 2 and "Traceback" not in alone.stderr
    assert f"{IDLE_APPS}: a --query-compute-apps capture without process rows holds no GPU facts" in alone.stderr
    both = json.loads(gpudoc_cli("check", "--snapshot", H200_GPU, "--snapshot", IDLE_APPS, "--only", "driver.nvml,proc",
                                 "--json").stdout)
    assert [g["processes"] for g in both["facts"]["gpus"]] == [[]]
    assert next(f for f in both["findings"] if f["id"] == "driver.nvml")["severity"] == "ok"


def test_host_checks_are_not_run_against_an_nvidia_smi_snapshot(tmp_path):
    result = gpudoc_cli("check", "--snapshot", A5000, "--only", "host,env.omp-threads", "--json", cwd=tmp_path)
    doc = json.loads(result.stdout)
    assert {f["id"]: f["severity"] for f in doc["findings"]} == {
        "env.omp-threads": "skip", "host.shm": "skip", "host.ram-offload": "skip", "host.disk": "skip"}
    host = doc["facts"]["host"]
    assert host["cpu_count"] is None and host["shm_total_bytes"] is None and host["runs_dir"] is None
    assert str(tmp_path) not in result.stdout  # nothing of this machine's disk
    text = gpudoc_cli("check", "--snapshot", A5000, "--only", "host", cwd=tmp_path).stdout
    assert "/dev/shm size: not checked (the snapshot has no host facts)" in text
    assert text.count("fix: on that machine: gpudoc check --json") == 1


def test_a_profile_without_a_model_is_never_sent_to_gpudoc_estimate(isolated_home):
    # a10g-24gb asks 20 GiB free on a 15 GiB T4 and has no [model]: `gpudoc estimate -p a10g-24gb` exits 2.
    result = gpudoc_cli("check", "-p", "a10g-24gb", "--snapshot", T4, "--only", "gpu.free-memory", "--json",
                        cwd=isolated_home)
    [f] = json.loads(result.stdout)["findings"]
    assert f["severity"] == "fail" and "gpudoc estimate -p" not in f["remedy"]
    assert "the card holds 15.0 GiB, less than min_free_gib in [gpu] of a10g-24gb" in f["remedy"]
    assert gpudoc_cli("estimate", "-p", "a10g-24gb", cwd=isolated_home).returncode == 2  # why it must not


def _modules_after(args: list[str]) -> set[str]:
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['gpudoc', *{args!r}]\n"
        "try:\n    runpy.run_module('gpudoc', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}, timeout=60)
    return set(done.stderr.rsplit("MODULES ", 1)[1].split())


def test_check_and_help_never_import_torch():
    for args in (["check"], ["check", "--snapshot", A5000], ["--help"], ["check", "--list-checks"]):
        modules = _modules_after(args)
        assert "gpudoc.checks" in modules or args == ["--help"]
        assert not {m for m in modules if m == "torch" or m.startswith("torch.")}, args


def test_help_does_not_import_the_checks():
    modules = _modules_after(["--help"])
    assert not {"gpudoc.checks", "psutil", "pynvml"} & modules


# What check and --help never need at start-up: the web stack plumbum's path module imports for
# one method gpudoc never calls (gpudoc.cli.lazy), and the job's own libraries.
NEVER_AT_START = {"http.client", "email.parser", "ssl", "urllib.request", "torch", "numpy", "transformers"}
# How many modules each may load (`python -c pass` loads ~70; at the time of writing check loads
# ~180 and --help ~205). Every module costs start-up: one more is fine, a new heavy import is not.
MAX_MODULES = {"check": 200, "--help": 225}


def test_check_and_help_start_without_the_web_stack():
    for args in (["check"], ["--help"], ["check", "--list-checks"]):
        modules = _modules_after(args)
        loaded = {m for m in NEVER_AT_START if m in modules}
        # urllib.request is there as gpudoc's stand-in only: the real one brings http.client.
        assert loaded <= {"urllib.request"}, (args, loaded)
        assert "http.client" not in modules, args
        assert len(modules) <= MAX_MODULES[args[0]], (args, len(modules))


def test_check_starts_without_plumbum_nor_the_other_commands():
    # check's usual command lines never import plumbum (gpudoc.commands.switches), nor the other
    # commands' results and renderers, nor the run records it does not read.
    for args in (["check"], ["check", "--json", "--only", "env"], ["check", "--list-checks"]):
        modules = _modules_after(args)
        assert not {m for m in modules if m.split(".")[0] in ("plumbum", "tomllib") or m == "urllib.request"}, args
        assert not {"gpudoc.results.runs", "gpudoc.render.runs_text", "gpudoc.runs.record", "gpudoc.cli.app"} & modules
    assert "plumbum" in _modules_after(["check", "--help"])  # help is plumbum's


def test_check_deep_probes_the_interpreter_the_profiles_latest_run_ran_behind_uv_run(isolated_home):
    """`check --deep` asks torch of the job's own interpreter: after `gpudoc run -p TIER -- uv run
    python train.py`, the project's environment as the real uv names it, not the python on PATH."""
    from gpudoc.profiles.loader import shipped_profiles_dir
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore
    from tests.job.test_envtools import _real_uv, _uv_venv

    environ = _real_uv(isolated_home)
    project = isolated_home / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\ndependencies = []\n')
    venv_python = _uv_venv(environ, project / ".venv")
    tier = shipped_profiles_dir() / "gpu-24gb.toml"
    RunStore(isolated_home / ".gpudoc").create(RunRecord(
        id="20260101-000000-aaaaaa", command=["uv", "run", "python", "train.py"], cwd=str(project),
        profile={"name": "gpu-24gb", "path": str(tier)}, status="ok", exit_code=0))
    done = gpudoc_cli("check", "-p", "gpu-24gb", "--snapshot", A5000, "--deep", "--json", cwd=isolated_home,
                      env=environ)
    torch = json.loads(done.stdout)["facts"]["torch"]
    assert torch["python"] == str(venv_python), torch  # the environment has no torch: the probe says so there
