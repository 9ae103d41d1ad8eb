"""`gpudoc runs`: one line per record, JSON with every record, lost runs told apart."""

from __future__ import annotations

import json

from gpudoc.runs.record import RunRecord, live_status
from tests.conftest import VENV_BIN, gpudoc_cli, tmux_screen


def test_table_and_json(isolated_home):
    assert "No runs yet" in gpudoc_cli("runs").stdout
    gpudoc_cli("run", "--no-check", "--", "python", "-c", "print(1)")
    gpudoc_cli("run", "--no-check", "--", "python", "-c", "raise SystemExit(3)")
    table = gpudoc_cli("runs")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "STARTED", "DURATION", "STATUS", "CAUSE", "PEAK", "STEP", "CHANGED", "COMMAND"]
    assert " ok " in lines[1] and "python -c 'print(1)'" in lines[1]
    assert " failed " in lines[2] and " error " in lines[2]
    doc = json.loads(gpudoc_cli("runs", "--json").stdout)
    assert doc["command"] == "runs" and doc["schema_version"] == 1
    assert [r["exit_code"] for r in doc["runs"]] == [0, 3]
    assert json.loads(gpudoc_cli("runs", "--json", "--last", "1").stdout)["runs"][0]["exit_code"] == 3


def test_a_running_record_whose_gpudoc_is_gone_is_lost():
    record = RunRecord(id="x", command=["t"], cwd=".", launcher_pid=2**22 + 4321, status="running")
    assert live_status(record) == "lost"
    import os

    record.launcher_pid = os.getpid()
    assert live_status(record) == "running"
    record.host = "some-other-node"
    record.launcher_pid = 2**22 + 4321
    assert live_status(record) == "running"  # another node's: not ours to judge


def test_runs_never_sends_a_recorded_commands_escape_sequences_to_the_terminal(isolated_home):
    from gpudoc.runs.store import RunStore

    store = RunStore(isolated_home / ".gpudoc")
    store.create(RunRecord(id="20250101-000000-aaaaaa", command=["python", "\x1b]0;pwned\x07train.py\x1b[2J"],
                           cwd=str(isolated_home), status="ok"))
    done = gpudoc_cli("runs", cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b]0;pwned\\x07train.py\\x1b[2J" in done.stdout


def test_the_table_shows_peak_share_and_what_changed_since_the_run_before(isolated_home):
    from gpudoc.runs.store import RunStore

    store = RunStore(isolated_home / ".gpudoc")
    gpus = [{"index": 0, "name": "A10G", "total_bytes": 24 * 2**30}]
    first = RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd=str(isolated_home),
                      status="failed", cause="gpu_oom", gpus=gpus, peak_memory_bytes={"0": 24 * 2**30},
                      profile={"knobs": {"micro_batch_size": 8, "gradient_accumulation_steps": 2}})
    second = RunRecord(id="20260101-000100000-bbbbbb", command=["python", "train.py"], cwd=str(isolated_home),
                       status="ok", cause="ok", gpus=gpus, peak_memory_bytes={"0": int(20.9 * 2**30)},
                       profile={"knobs": {"micro_batch_size": 4, "gradient_accumulation_steps": 4}})
    store.create(first)
    store.create(second)
    lines = gpudoc_cli("runs", cwd=isolated_home).stdout.splitlines()
    assert "PEAK" in lines[0] and "CHANGED" in lines[0]
    assert "100%" in lines[1] and lines[1].split()[7] == "-"  # nothing before it to compare with
    assert "87%" in lines[2] and "accum 2→4, mbs 8→4" in lines[2]


def test_runs_diff_shows_what_changed_between_two_runs(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 2\n"
                                                "[bind]\nenv = true\n")
    assert gpudoc_cli("run", "--no-check", "--", "python", "-c", "print(1)", cwd=isolated_home).returncode == 0
    (isolated_home / "gpudoc.toml").write_text("[train]\nmicro_batch_size = 4\ngradient_accumulation_steps = 4\n"
                                                "[bind]\nenv = true\n")
    assert gpudoc_cli("run", "--no-check", "--", "python", "-c", "raise SystemExit(2)", cwd=isolated_home).returncode == 2
    first, second = (r["id"] for r in json.loads(gpudoc_cli("runs", "--json", cwd=isolated_home).stdout)["runs"])
    text = gpudoc_cli("runs", "diff", first, second, cwd=isolated_home).stdout
    assert "micro_batch_size: 8 -> 4" in text and "GPUDOC_MICRO_BATCH_SIZE: 8 -> 4" in text
    assert "status: ok -> failed" in text and "exit_code: 0 -> 2" in text
    doc = json.loads(gpudoc_cli("runs", "diff", first, second, "--json", cwd=isolated_home).stdout)
    assert doc["knobs"]["gradient_accumulation_steps"] == {"a": 2, "b": 4}
    assert doc["outcome"]["status"] == {"a": "ok", "b": "failed"}
    same = gpudoc_cli("runs", "diff", first, first, cwd=isolated_home).stdout
    assert "nothing changed" in same
    missing = gpudoc_cli("runs", "diff", first, "nope", cwd=isolated_home)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr


def _sampled_run(isolated_home, *, cause="ok"):
    from gpudoc.launch.watch import GpuSampler, nvml_reader
    from gpudoc.runs.store import RunStore
    from tests.facts.fake_nvml import FakeNvml
    from tests.launch.test_watch import DUAL_A5000

    store = RunStore(isolated_home / ".gpudoc")
    record = RunRecord(id="20260101-000000000-bbbbbb", command=["torchrun", "train.py"], cwd=str(isolated_home),
                       status="failed" if cause != "ok" else "ok", cause=cause, duration_s=120.0)
    store.create(record)
    clock = iter(float(t) for t in range(1000, 1120))
    sampler = GpuSampler(store.samples_path(record.id), reader=nvml_reader(FakeNvml.from_snapshot(DUAL_A5000)),
                         clock=lambda: next(clock))
    for _ in range(120):
        sampler.sample()
    sampler.close()
    return record


def test_runs_show_plots_a_png_and_an_svg(isolated_home):
    import struct

    record = _sampled_run(isolated_home, cause="gpu_oom")
    done = gpudoc_cli("runs", "show", record.id, "--plot", "memory.png", cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    png = (isolated_home / "memory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (900, 450)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(isolated_home / "memory.png"))
    assert pixels.std() > 0.05  # lines, labels and a legend, not a blank canvas
    assert gpudoc_cli("runs", "show", record.id, "--plot", "memory.svg", cwd=isolated_home).returncode == 0
    svg = (isolated_home / "memory.svg").read_text()
    assert "<svg" in svg and "out of memory" in svg and "GPU 1 capacity" in svg
    wrong = gpudoc_cli("runs", "show", record.id, "--plot", "memory.jpg", cwd=isolated_home)
    assert wrong.returncode == 2 and "must end in .png or .svg" in wrong.stderr


def test_runs_show_draws_memory_over_time_from_the_samples(isolated_home):
    from gpudoc.facts.nvml import read_gpus
    from gpudoc.launch.watch import GpuSampler, nvml_reader
    from gpudoc.runs.store import RunStore
    from tests.facts.fake_nvml import FakeNvml
    from tests.launch.test_watch import DUAL_A5000

    store = RunStore(isolated_home / ".gpudoc")
    record = RunRecord(id="20260101-000000000-aaaaaa", command=["torchrun", "train.py"], cwd=str(isolated_home),
                       status="ok", cause="ok", duration_s=120.0, profile={"knobs": {"micro_batch_size": 4}})
    store.create(record)
    backend = FakeNvml.from_snapshot(DUAL_A5000)  # a real capture: two A5000s
    _, _, _, gpus, _ = read_gpus(backend)
    clock = iter(float(t) for t in range(1000, 1120))
    sampler = GpuSampler(store.samples_path(record.id), reader=nvml_reader(backend), clock=lambda: next(clock))
    for _ in range(120):
        sampler.sample()
    sampler.close()
    text = gpudoc_cli("runs", "show", record.id, cwd=isolated_home).stdout
    assert "command: torchrun train.py" in text and "knobs: micro_batch_size=4" in text
    charts = [line for line in text.splitlines() if line.strip().startswith("GPU ")]
    assert len(charts) == 2
    for gpu, chart in zip(gpus, charts):
        share = gpu.memory_used_bytes / gpu.memory_total_bytes
        assert f"= {share:.0%}" in chart
        marks = chart.split()[2]
        assert len(marks) == 60 and set(marks) <= set("▁▂▃▄▅▆▇█")  # every slice had a sample
    doc = json.loads(gpudoc_cli("runs", "show", record.id, "--json", cwd=isolated_home).stdout)
    timeline = doc["timeline"]["gpus"]
    assert sorted(timeline) == ["0", "1"]
    assert max(timeline["0"]["used_bytes"]) == gpus[0].memory_used_bytes
    assert doc["timeline"]["end"] - doc["timeline"]["start"] == 119.0


def test_runs_all_lists_every_project_gpudoc_ran_in(isolated_home, tmp_path):
    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state)}
    first, second, elsewhere = (isolated_home / name for name in ("alpha", "beta", "elsewhere"))
    for folder in (first, second, elsewhere):
        folder.mkdir()
    for folder, code in ((first, "print('a')"), (second, "print('b')"), (first, "print('c')")):
        assert gpudoc_cli("run", "--no-check", "--", "python", "-c", code, cwd=folder, env=env).returncode == 0
    assert (state / "gpudoc" / "projects").read_text().splitlines() == [
        str(first / ".gpudoc" / "runs"), str(second / ".gpudoc" / "runs")]  # each project once
    text = gpudoc_cli("runs", "--all", cwd=elsewhere, env=env).stdout
    assert f"== {first / '.gpudoc' / 'runs'}" in text and f"== {second / '.gpudoc' / 'runs'}" in text
    assert text.count("python -c") == 3
    doc = json.loads(gpudoc_cli("runs", "--all", "--json", cwd=elsewhere, env=env).stdout)
    assert [len(project["runs"]) for project in doc["projects"]] == [2, 1]
    # The envelope's own key for runs is `runs`, with --all too: every project's records.
    assert [run["cwd"] for run in doc["runs"]] == [str(first), str(first), str(second)]
    import shutil

    shutil.rmtree(second / ".gpudoc")  # a project gone: dropped from the list, never an error
    doc = json.loads(gpudoc_cli("runs", "--all", "--json", cwd=elsewhere, env=env).stdout)
    assert [project["runs_dir"] for project in doc["projects"]] == [str(first / ".gpudoc" / "runs")]


def test_runs_all_says_which_records_of_a_project_it_skipped(isolated_home, tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    project, elsewhere = isolated_home / "alpha", isolated_home / "elsewhere"
    project.mkdir(), elsewhere.mkdir()
    for code in ("print('a')", "print('b')"):
        assert gpudoc_cli("run", "--no-check", "--", "python", "-c", code, cwd=project, env=env).returncode == 0
    runs_dir = project / ".gpudoc" / "runs"
    broken = sorted(path for path in runs_dir.iterdir() if path.is_dir())[0]
    (broken / "run.json").write_text("{not json")
    listed = gpudoc_cli("runs", "--all", cwd=elsewhere, env=env)
    assert listed.returncode == 0 and listed.stdout.count("python -c") == 1
    notes = [line for line in listed.stderr.splitlines() if "skipped" in line]
    assert notes == [notes[0]] and f"skipped 1 unreadable run record(s) in {runs_dir} ({broken.name}: " in notes[0]


def test_runs_show_in_a_real_tmux_pane_shows_the_chart_and_where_knobs_went(isolated_home, tmux_env):
    import os
    import subprocess

    (isolated_home / "gpudoc.toml").write_text('[train]\nmicro_batch_size = 4\n[bind]\nargs = "hf-trainer"\n')
    assert gpudoc_cli("run", "--no-check", "--", "python", "-c", "print(1)", "--per_device_train_batch_size", "8",
                      cwd=isolated_home).returncode == 0
    record = _sampled_run(isolated_home)
    env = {**os.environ, **tmux_env}
    subprocess.run(["tmux", "new-session", "-d", "-s", "show", "-x", "150", "-y", "40", "-c", str(isolated_home)],
                   env=env, check=True)
    gpudoc = os.path.join(VENV_BIN, "gpudoc")  # a login shell in the pane resets PATH
    for number, command in enumerate((f"{gpudoc} runs show {record.id}", f"{gpudoc} runs show")):
        # The marker is typed split ("shown""-here-N") so that only the echo's output, after the
        # command has printed everything, matches: the typed line never does, and each command has
        # its own, since the one before stays on the screen until `clear` runs.
        subprocess.run(["tmux", "send-keys", "-t", "=show:", f'clear; {command}; echo "shown""-here-{number}"',
                        "Enter"], env=env, check=True)
        screen = tmux_screen(env, "=show:", until=f"shown-here-{number}")
        if record.id in command:
            assert "GPU 0 ████" in screen and "= 91%" in screen, screen
        else:
            # The latest run is the bound one: its arguments carry the profile's knob.
            assert "command: python -c 'print(1)' --per_device_train_batch_size 4" in screen, screen
            assert "as typed: python -c 'print(1)' --per_device_train_batch_size 8" in screen, screen


def _retry_chain(isolated_home):
    """What `run --retry-oom 2 -- python train.py --per_device_train_batch_size 16` records: each
    attempt keeps the user's command and launches the rung's arguments, linked to the one before."""
    from gpudoc.runs.store import RunStore

    store = RunStore(isolated_home / ".gpudoc")
    typed = ["python", "train.py", "--per_device_train_batch_size", "16"]
    parent = None
    chain = []
    for number, (mbs, accum) in enumerate(((16, 2), (8, 4), (4, 8))):
        record = RunRecord(id=f"20260101-00000{number}000-aaaaa{number}", command=list(typed),
                           argv=[*typed[:-1], str(mbs)], cwd=str(isolated_home), status="failed", cause="gpu_oom",
                           parent=parent, profile={"knobs": {"micro_batch_size": mbs,
                                                             "gradient_accumulation_steps": accum}})
        store.create(record)
        chain.append(record)
        parent = record.id
    return store, chain


def test_runs_lists_what_each_attempt_ran_and_what_it_changed_whatever_the_window(isolated_home):
    _, chain = _retry_chain(isolated_home)
    rows = gpudoc_cli("runs", cwd=isolated_home).stdout.splitlines()[1:]
    assert [row.endswith(f"--per_device_train_batch_size {mbs}") for row, mbs in zip(rows, (16, 8, 4))] == [True] * 3
    assert "accum 4→8, mbs 8→4" in rows[2]
    [last] = gpudoc_cli("runs", "--last", "1", cwd=isolated_home).stdout.splitlines()[1:]
    assert last.split() == rows[2].split()  # its parent is outside the window, and still what it is compared with
    text = gpudoc_cli("runs", "show", chain[2].id, cwd=isolated_home).stdout
    assert "command: python train.py --per_device_train_batch_size 4" in text


def test_a_run_without_a_parent_is_compared_with_the_run_before_it_even_when_not_listed(isolated_home):
    from gpudoc.runs.store import RunStore

    store = RunStore(isolated_home / ".gpudoc")
    for run_id, mbs in (("20260101-000000000-aaaaaa", 8), ("20260101-000100000-bbbbbb", 4)):
        store.create(RunRecord(id=run_id, command=["python", "train.py"], cwd=str(isolated_home), status="ok",
                               profile={"knobs": {"micro_batch_size": mbs}}))
    [row] = gpudoc_cli("runs", "--last", "1", cwd=isolated_home).stdout.splitlines()[1:]
    assert "mbs 8→4" in row


def test_a_runs_path_that_is_a_file_is_said_not_no_runs(isolated_home):
    (isolated_home / ".gpudoc").mkdir()
    (isolated_home / ".gpudoc" / "runs").write_text("")
    for args in (("runs",), ("logs",)):
        done = gpudoc_cli(*args, cwd=isolated_home)
        assert done.returncode == 2 and "No runs yet" not in done.stdout, done
        assert done.stderr == f"gpudoc: {isolated_home / '.gpudoc' / 'runs'}: cannot read the run records: " \
                              "Not a directory\n"


def test_a_runs_directory_that_cannot_be_read_is_said(isolated_home):
    # A link loop where the runs directory goes: unreadable for root too (CI runs as root, which
    # reads any directory whatever its mode).
    runs = isolated_home / ".gpudoc" / "runs"
    runs.parent.mkdir()
    runs.symlink_to(runs)
    done = gpudoc_cli("runs", cwd=isolated_home, env={"GPUDOC_HOME": str(isolated_home / ".gpudoc")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"gpudoc: {runs}: cannot read the run records: Too many levels of symbolic links"


def test_a_malformed_record_is_skipped_with_a_note_and_named_when_asked_for(isolated_home):
    from gpudoc.runs.store import RECORD

    store, chain = _retry_chain(isolated_home)
    bad = chain[1]
    for malformed in ("[]", json.dumps(bad.to_dict() | {"started_at": 5}), json.dumps(bad.to_dict() | {"duration_s": "x"})):
        (store.run_dir(bad.id) / RECORD).write_text(malformed)
        listed = gpudoc_cli("runs", cwd=isolated_home)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        assert bad.id not in listed.stdout and chain[2].id in listed.stdout
        [note] = listed.stderr.splitlines()
        assert note.startswith(f"gpudoc: note: skipped 1 unreadable run record(s) in {store.root} ({bad.id}: ")
        shown = gpudoc_cli("runs", "show", bad.id, cwd=isolated_home)
        assert shown.returncode == 2 and len(shown.stderr.splitlines()) == 1, shown.stderr
        assert f"{store.run_dir(bad.id) / RECORD}: unreadable run record: " in shown.stderr


def test_file_edits_read_as_changes_and_diff_shows_every_edit_between_two_runs(tmp_path):
    import shutil
    import sys
    from pathlib import Path

    shutil.copy(Path(__file__).with_name("jobs") / "nanogpt_config.py", tmp_path / "train.py")
    (tmp_path / "cfg.py").write_text("batch_size = 32\n")
    command = ["run", "--no-check", "--", sys.executable, "train.py", "cfg.py"]
    assert gpudoc_cli(*command, cwd=tmp_path).returncode == 1
    assert gpudoc_cli("fix", "--apply", cwd=tmp_path).returncode == 0  # cfg.py: 32 -> 16, for the next attempt
    assert gpudoc_cli(*command, cwd=tmp_path).returncode == 0  # reads 16: nothing of its own to edit
    first, second = sorted(p.name for p in (tmp_path / ".gpudoc" / "runs").iterdir())
    shown = gpudoc_cli("runs", "show", first, cwd=tmp_path).stdout
    assert f"  then edited (for the next attempt) {tmp_path / 'cfg.py'}: batch_size 32 -> 16\n" in shown
    assert "{'key'" not in shown
    diffed = gpudoc_cli("runs", "diff", first, second, cwd=tmp_path).stdout
    assert f"  file edits:\n    {tmp_path / 'cfg.py'} batch_size: 32 -> 16\n" in diffed
    doc = json.loads(gpudoc_cli("runs", "diff", first, second, "--json", cwd=tmp_path).stdout)
    assert doc["edits"] == {f"{tmp_path / 'cfg.py'} batch_size": {"a": 32, "b": 16}}


def test_show_and_diff_say_what_the_probe_saw_and_what_a_rung_cost_in_time(isolated_home):
    from gpudoc.runs.store import RunStore

    store = RunStore(isolated_home / ".gpudoc")
    observed = {"micro_batch_size": {"value": 4, "how": "input-shape", "ranks": [0], "others": {}},
                "gradient_accumulation_steps": {"value": 2, "how": "backward-per-step", "ranks": [0], "others": {}}}
    before = RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd=str(isolated_home),
                       status="failed", cause="gpu_oom", observed=observed,
                       steps={"count": 3, "seconds_per_step": 0.78, "samples_per_second": 10.3},
                       oom={"rank": 1, "step": 3, "phase": "backward", "breakdown": {
                           "parameters": 2 * 2**30, "gradients": 2 * 2**30, "optimizer_states": 4 * 2**30},
                            "top": [{"where": "model.py:88 forward", "module": "model", "bytes": 3 * 2**30}],
                            "snapshot": "/runs/x/probe/snapshot-rank-1.pickle.gz"})
    after = RunRecord(id="20260101-000100000-bbbbbb", command=["python", "train.py"], cwd=str(isolated_home),
                      status="ok", cause="ok", observed=observed,
                      steps={"count": 40, "seconds_per_step": 0.9438, "samples_per_second": 8.5,
                             "peak_allocated_bytes": 3 * 2**30})
    store.create(before)
    store.create(after)
    shown = gpudoc_cli("runs", "show", before.id, cwd=isolated_home).stdout
    assert "  observed in the job: gradient_accumulation_steps=2 (backward-per-step), micro_batch_size=4 " \
           "(input-shape)" in shown
    assert "  steps: 3 optimizer step(s), 0.78 s each (median, the first left out), 10.3 samples/s" in shown
    assert ("  out of memory: rank 1, backward, after 3 step(s); parameters 2.0 GiB, gradients 2.0 GiB, "
            "optimizer states 4.0 GiB") in shown
    assert "    3.0 GiB live from model.py:88 forward" in shown
    assert "  memory history: /runs/x/probe/snapshot-rank-1.pickle.gz (gunzip it, then drop the .pickle on " \
           "https://pytorch.org/memory_viz)" in shown
    assert "peak allocated 3.0 GiB" in gpudoc_cli("runs", "show", after.id, cwd=isolated_home).stdout
    diff = gpudoc_cli("runs", "diff", before.id, after.id, cwd=isolated_home).stdout
    assert "step time: 0.78 s -> 0.944 s (+21%)" in diff and "samples/s: 10.3 -> 8.5 (-17%)" in diff
    doc = json.loads(gpudoc_cli("runs", "diff", before.id, after.id, "--json", cwd=isolated_home).stdout)
    assert doc["outcome"]["seconds_per_step"] == {"a": 0.78, "b": 0.9438}
