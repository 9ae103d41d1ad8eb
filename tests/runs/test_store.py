"""Run records: atomic, ordered, found by prefix, the runs directory kept out of git."""

from __future__ import annotations

import json
import os

import pytest

from gpudoc.errors import InputError
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RECORD, RunStore, new_run_id


def make(store: RunStore, **fields) -> RunRecord:
    record = RunRecord(id=new_run_id(), command=["python", "train.py"], cwd="/x", **fields)
    store.create(record)
    return record


def test_ids_sort_in_creation_order_even_within_one_second(tmp_path):
    store = RunStore(tmp_path)
    made = [make(store).id for _ in range(20)]
    assert store.ids() == made
    assert store.latest().id == made[-1]


def test_create_writes_a_gitignore_and_json_with_the_spec_keys(tmp_path):
    store = RunStore(tmp_path)
    record = make(store, parent="abc", job_id="slurm-42")
    assert (tmp_path / ".gitignore").read_text().strip().endswith("*")
    data = json.loads((store.run_dir(record.id) / RECORD).read_text())
    for key in ("id", "command", "cwd", "profile", "env_set", "file_edits", "started_at", "ended_at",
                "exit_code", "signal", "cause", "diagnosis", "peak_memory_bytes", "gpus", "parent",
                "host", "job_id", "gpudoc_version"):
        assert key in data
    assert data["parent"] == "abc" and data["job_id"] == "slurm-42"


def test_load_by_unique_prefix_and_errors_name_the_problem(tmp_path):
    store = RunStore(tmp_path)
    record = make(store)
    assert store.load(record.id[:-2]).id == record.id
    with pytest.raises(InputError, match="no run 'nope'"):
        store.load("nope")
    make(store)
    with pytest.raises(InputError, match="ambiguous"):
        store.load(record.id[:4])


def test_a_corrupt_record_is_one_clear_error_and_skipped_when_listing(tmp_path):
    store = RunStore(tmp_path)
    good = make(store)
    bad = make(store)
    (store.run_dir(bad.id) / RECORD).write_text("{not json")
    with pytest.raises(InputError, match="unreadable run record"):
        store.load(bad.id)
    assert [r.id for r in store.records()] == [good.id]


def test_gpudoc_home_overrides_the_working_directory(tmp_path):
    work = tmp_path / "work"
    assert RunStore.locate(work, {"GPUDOC_HOME": str(tmp_path / "shared")}).root == tmp_path / "shared" / "runs"
    assert RunStore.locate(work, {"GPUDOC_HOME": ""}).root == work / ".gpudoc" / "runs"
    assert RunStore.locate(work, {}).root == work / ".gpudoc" / "runs"


def test_unknown_keys_from_newer_versions_are_ignored(tmp_path):
    data = RunRecord(id="x", command=[], cwd="/").to_dict() | {"from_the_future": 1}
    assert RunRecord.from_dict(data).id == "x"


def test_latest_follows_the_retry_chain_within_one_second(tmp_path):
    store = RunStore(tmp_path)
    # Same second; the child's random suffix sorts before its parent's, so "the last id" is wrong.
    store.create(RunRecord(id="20250101-000000-ffffff", command=["a"], cwd="/"))
    store.create(RunRecord(id="20250101-000000-000000", command=["a"], cwd="/", parent="20250101-000000-ffffff"))
    assert store.ids()[-1] == "20250101-000000-ffffff"
    assert store.latest().id == "20250101-000000-000000"
    # An older second never competes, whatever its order inside the chain.
    store.create(RunRecord(id="20250101-000001-aaaaaa", command=["a"], cwd="/"))
    assert store.latest().id == "20250101-000001-aaaaaa"


def test_records_are_parsed_once_and_again_only_when_changed(tmp_path):
    store = RunStore(tmp_path)
    first = make(store)
    [again] = store.records()
    assert next(iter(store.records())) is again  # the same object: not parsed a second time
    # Another process rewrites the record (a later `gpudoc run` finishing): the store sees it.
    other = RunStore(tmp_path)
    changed = other.load(first.id)
    changed.status = "ok"
    path = store.run_dir(first.id) / RECORD
    stamp = path.stat().st_mtime_ns
    other.save(changed)
    os.utime(path, ns=(stamp + 10**9, stamp + 10**9))  # coarse file-system clocks
    [seen] = store.records()
    assert seen.status == "ok" and seen is not again
    # A record another process added is found too.
    added = make(other)
    assert [r.id for r in store.records()] == [first.id, added.id]


def test_history_is_the_same_file_when_both_know_it_else_the_same_name(tmp_path):
    store = RunStore(tmp_path / "home")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    profile = work / "gpudoc.toml"
    profile.write_text("")
    same_file = make(store, profile={"name": "other-name", "path": str(work / "sub" / ".." / "gpudoc.toml")})
    other_file = make(store, profile={"name": "gpudoc", "path": str(work / "elsewhere.toml")})
    same_name = make(store, profile={"name": "gpudoc"})
    make(store, profile=None)
    found = store.history(profile_path=profile, profile_name="gpudoc")
    assert [r.id for r in found] == [same_file.id, same_name.id]
    assert other_file.id not in [r.id for r in found]
    # By name alone (a profile with no file): only records that name it.
    assert [r.id for r in store.history(profile_path=None, profile_name="gpudoc")] == [other_file.id, same_name.id]
    # The run being fixed is part of its own history even when it ran under another profile.
    stranger = make(store, profile={"name": "x"})
    assert store.history(profile_path=profile, profile_name="gpudoc", upto=stranger)[-1] is stranger


def test_the_store_is_found_upward_like_git_within_the_project_and_below_home(tmp_path):
    from gpudoc.runs.store import RunStore

    home = tmp_path / "home"
    project = home / "proj"
    deep = project / "src" / "models"
    deep.mkdir(parents=True)
    (project / ".gpudoc" / "runs").mkdir(parents=True)
    env = {"HOME": str(home)}
    assert RunStore.locate(deep, env).root == project / ".gpudoc" / "runs"
    assert RunStore.locate(project, env).root == project / ".gpudoc" / "runs"
    # A repository inside the project is a project of its own.
    (project / "src" / ".git").mkdir()
    assert RunStore.locate(deep, env).root == deep / ".gpudoc" / "runs"
    # ~/.gpudoc belongs to runs started in ~, not to every project below it.
    (home / ".gpudoc" / "runs").mkdir(parents=True)
    other = home / "other" / "x"
    other.mkdir(parents=True)
    assert RunStore.locate(other, env).root == other / ".gpudoc" / "runs"
    assert RunStore.locate(home, env).root == home / ".gpudoc" / "runs"
    assert RunStore.locate(deep, {**env, "GPUDOC_HOME": str(tmp_path / "team")}).root == tmp_path / "team" / "runs"


def test_runs_fix_and_logs_work_from_a_subdirectory(isolated_home):
    import sys

    from tests.conftest import gpudoc_cli

    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "print('from the top')",
                      cwd=isolated_home).returncode == 0
    below = isolated_home / "src" / "deeper"
    below.mkdir(parents=True)
    assert "from the top" in gpudoc_cli("logs", cwd=below).stdout
    listed = gpudoc_cli("runs", cwd=below)
    assert listed.returncode == 0 and "print(" in listed.stdout
    assert gpudoc_cli("fix", cwd=below).returncode == 1  # found the run: it did not fail
    # A run started below goes with the project's others.
    assert gpudoc_cli("run", "--no-check", "--", "true", cwd=below).returncode == 0
    assert not (below / ".gpudoc").exists()
    assert len(list((isolated_home / ".gpudoc" / "runs").iterdir())) == 2


def test_an_unreadable_record_is_skipped_and_said_once_with_why(tmp_path):
    store = RunStore(tmp_path)
    good = make(store)
    bad = make(store)
    (store.run_dir(bad.id) / RECORD).write_text("[]")
    assert store.latest().id == good.id  # the fallback past the newest...
    [note] = store.take_notes()  # ...is said, naming the record and what is wrong with it
    assert note.startswith(f"gpudoc: note: skipped 1 unreadable run record(s) in {store.root}")
    assert f"{bad.id}: expected a JSON object" in note
    assert store.take_notes() == []  # once per command
    assert [r.id for r in store.records()] == [good.id]


def test_a_record_of_the_wrong_shape_is_one_error_naming_file_and_key(tmp_path):
    store = RunStore(tmp_path)
    record = make(store)
    path = store.run_dir(record.id) / RECORD
    path.write_text(json.dumps(record.to_dict() | {"duration_s": "x"}))
    with pytest.raises(InputError, match=r"run\.json: unreadable run record: key 'duration_s' holds \"x\"") as raised:
        store.load(record.id)
    assert raised.value.file == str(path) and raised.value.key == "duration_s"


def test_a_record_copied_into_another_runs_directory_is_not_trusted(tmp_path):
    store = RunStore(tmp_path)
    first = make(store)
    second = make(store)
    copied = store.run_dir(second.id) / RECORD
    copied.write_text((store.run_dir(first.id) / RECORD).read_text())
    with pytest.raises(InputError, match=f"its id '{first.id}' is not its directory's name"):
        store.load(second.id)
    assert store.latest().id == first.id
    assert second.id in store.unreadable and "is not its directory's name" in store.unreadable[second.id]


def test_a_record_mid_creation_is_skipped_without_a_note(tmp_path):
    store = RunStore(tmp_path)
    good = make(store)
    store.run_dir("20991231-235959000-ffffff").mkdir()  # `create` made the directory, not yet the record
    assert store.latest().id == good.id and store.take_notes() == []


def test_a_runs_path_that_cannot_be_listed_is_an_error_not_no_runs(tmp_path):
    store = RunStore(tmp_path)
    store.require_readable()  # nothing there yet: no runs, no error
    tmp_path.mkdir(exist_ok=True)
    store.root.write_text("")
    with pytest.raises(InputError, match="runs: cannot read the run records: Not a directory"):
        store.require_readable()
    with pytest.raises(InputError, match="Not a directory"):
        store.named_or_latest(None)


def test_no_runs_yet_says_how_to_start_one_as_runs_does(tmp_path):
    # `gpudoc runs` in the same place: "No runs yet in DIR (start one with `gpudoc run -- COMMAND`)."
    with pytest.raises(InputError) as caught:
        RunStore(tmp_path).named_or_latest(None)
    assert str(caught.value).endswith("(start one with `gpudoc run -- COMMAND`)")
    assert "see `gpudoc runs`" not in str(caught.value)


def test_no_readable_runs_says_which_were_skipped(tmp_path):
    store = RunStore(tmp_path)
    bad = make(store)
    (store.run_dir(bad.id) / RECORD).write_text("{not json")
    with pytest.raises(InputError, match=f"no runs yet in .*; skipped 1 unreadable run record.*{bad.id}: Expecting"):
        store.named_or_latest(None)


def test_commands_that_fall_back_past_an_unreadable_newest_record_say_so(isolated_home):
    import sys

    from tests.conftest import gpudoc_cli

    for code in ("raise SystemExit(3)", "print('b')"):
        gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", code, cwd=isolated_home)
    store = RunStore(isolated_home / ".gpudoc")
    older, newest = store.ids()
    bad = store.run_dir(newest) / RECORD
    for malformed in ('[]', json.dumps(json.loads(bad.read_text()) | {"command": None})):
        bad.write_text(malformed)
        for args in (("fix",), ("logs",), ("restore", "--dry-run"), ("runs",)):
            done = gpudoc_cli(*args, cwd=isolated_home)
            assert done.returncode in (0, 1) and "Traceback" not in done.stderr, (args, done.stderr)
            notes = [line for line in done.stderr.splitlines() if "unreadable run record" in line]
            assert notes == [f"gpudoc: note: skipped 1 unreadable run record(s) in {store.root} ({newest}: "
                             + ("expected a JSON object, found [])" if malformed == "[]" else
                                "key 'command' holds null, expected list[str])")], (args, done.stderr)
        assert older in gpudoc_cli("fix", "--json", cwd=isolated_home).stdout  # it read the run before
        named = gpudoc_cli("fix", newest, cwd=isolated_home)
        assert named.returncode == 2 and named.stderr.startswith(f"gpudoc: {bad}: unreadable run record: ")


# -- a runs directory another user owns or can write (SPEC "Trust") --------------------------------

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")


def _planted_store(top):
    """Another user's world-writable .gpudoc/runs above the working directory, outside $HOME,
    holding a failed run whose command is theirs."""
    store = RunStore(top / ".gpudoc")
    record = make(store, status="failed", cause="gpu_oom")
    for path in (top / ".gpudoc", store.root, store.run_dir(record.id), store.run_dir(record.id) / RECORD):
        os.chown(path, NOBODY, NOBODY)
    os.chmod(store.root, 0o777)
    return store, record


@needs_root
def test_the_upward_search_passes_over_another_users_world_writable_store_saying_so(tmp_path):
    shared = tmp_path / "scratch"
    below = shared / "me" / "job"
    below.mkdir(parents=True)
    _store, planted = _planted_store(shared)
    found = RunStore.locate(below, {"HOME": str(tmp_path / "home")})
    assert found.root == below / ".gpudoc" / "runs"
    assert found.located_notes == [f"gpudoc: note: {shared / '.gpudoc'} belongs to nobody, not to you (root): its "
                                   "run records are not used (if you trust it, copy it to a file of your own and "
                                   "use that)"]
    from tests.conftest import gpudoc_cli

    listed = gpudoc_cli("runs", cwd=below, env={"HOME": str(tmp_path / "home")})
    assert listed.returncode == 0 and planted.id not in listed.stdout + listed.stderr.replace(str(shared), "")
    assert listed.stderr.count("its run records are not used") == 1
    fixed = gpudoc_cli("fix", "--rerun", cwd=below, env={"HOME": str(tmp_path / "home")})
    assert fixed.returncode == 2 and "no run records in" in fixed.stderr and "Traceback" not in fixed.stderr
    assert planted.id not in fixed.stderr


def test_a_world_writable_runs_directory_is_passed_over_even_when_it_is_the_users(tmp_path):
    below = tmp_path / "scratch" / "job"
    below.mkdir(parents=True)
    (tmp_path / "scratch" / ".gpudoc" / "runs").mkdir(parents=True)
    os.chmod(tmp_path / "scratch" / ".gpudoc" / "runs", 0o777)
    found = RunStore.locate(below, {"HOME": str(tmp_path / "home")})
    assert found.root == below / ".gpudoc" / "runs"
    [note] = found.located_notes
    assert "can be written by every user (mode 0777): its run records are not used" in note


def test_no_record_is_written_into_a_runs_directory_others_can_write(isolated_home):
    import sys

    from gpudoc.runs.store import StoreError
    from tests.conftest import gpudoc_cli

    store = RunStore(isolated_home / ".gpudoc")
    store.root.mkdir(parents=True)
    os.chmod(store.root, 0o777)
    with pytest.raises(StoreError, match="can be written by every user .*: gpudoc will not keep run records there"):
        make(store)
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "open('RAN', 'w')", cwd=isolated_home)
    assert done.returncode == 125 and "gpudoc will not keep run records there" in done.stderr
    assert "Traceback" not in done.stderr and not (isolated_home / "RAN").exists()


@needs_root
def test_a_group_writable_home_is_fine_only_when_explicit_and_shared(tmp_path):
    team = tmp_path / "team"
    (team / "runs").mkdir(parents=True)
    os.chown(team / "runs", 0, NOBODY)  # the team's group, not the user's own
    os.chmod(team / "runs", 0o2775)
    explicit = RunStore.locate(tmp_path, {"GPUDOC_HOME": str(team)})
    make_shared = RunRecord(id=new_run_id(), command=["python"], cwd="/x")
    explicit.create(make_shared, shared=True)  # [run] shared = true: the team may write there
    from gpudoc.runs.store import StoreError

    with pytest.raises(StoreError, match="can be written by group nogroup"):
        explicit.create(RunRecord(id=new_run_id(), command=["python"], cwd="/x"))
    with pytest.raises(StoreError, match="can be written by group nogroup"):
        RunStore(team).create(RunRecord(id=new_run_id(), command=["python"], cwd="/x"), shared=True)  # found, not named


def test_runs_started_in_the_same_second_have_one_latest_for_every_command(tmp_path):
    """Two nodes (or an older gpudoc without milliseconds) start runs in the same second: the id's
    random suffix says nothing of their order. `runs` lists them, and `fix`, `logs` and `runs
    show` pick "the latest", by one tie-break: the last row of `runs` is the run `logs` prints."""
    from tests.conftest import gpudoc_cli

    store = RunStore(tmp_path)
    store.create(RunRecord(id="20250101-000000-ffffff", command=["a"], cwd="/", status="failed",
                           pids=[{"pid": 1, "create_time": 100.0}]))
    store.create(RunRecord(id="20250101-000000-000000", command=["a"], cwd="/", status="ok",
                           parent="20250101-000000-ffffff", pids=[{"pid": 2, "create_time": 100.5}]))
    store.create(RunRecord(id="20250101-000000-888888", command=["a"], cwd="/", status="ok",
                           pids=[{"pid": 3, "create_time": 100.2}]))
    for run_id in store.ids():
        store.log_path(run_id).write_text(f"log of {run_id}\n")
    assert [r.id for r in store.records()] == ["20250101-000000-ffffff", "20250101-000000-888888",
                                               "20250101-000000-000000"]
    assert [r.id for r in store.records(newest=1)] == [store.latest().id] == ["20250101-000000-000000"]
    env = {"GPUDOC_HOME": str(tmp_path)}
    listed = json.loads(gpudoc_cli("runs", "--json", cwd=tmp_path, env=env).stdout)
    assert [row["id"] for row in listed["runs"]][-1] == "20250101-000000-000000"
    assert gpudoc_cli("logs", cwd=tmp_path, env=env).stdout == "log of 20250101-000000-000000\n"
    last = json.loads(gpudoc_cli("runs", "--last", "1", "--json", cwd=tmp_path, env=env).stdout)
    assert [row["id"] for row in last["runs"]] == ["20250101-000000-000000"]


def test_within_a_second_the_millisecond_an_id_carries_comes_before_the_jobs_start(tmp_path):
    store = RunStore(tmp_path)
    store.create(RunRecord(id="20250101-000000100-ffffff", command=["a"], cwd="/",
                           pids=[{"pid": 1, "create_time": 500.0}]))  # its job is still starting
    store.create(RunRecord(id="20250101-000000900-000000", command=["a"], cwd="/"))  # no process seen
    assert [r.id for r in store.records()] == ["20250101-000000100-ffffff", "20250101-000000900-000000"]
    assert store.latest().id == "20250101-000000900-000000"
