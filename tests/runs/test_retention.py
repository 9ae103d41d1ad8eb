"""Pruning run records: the oldest go, a live chain and other users' records stay, links are not followed."""

from __future__ import annotations

import os
import time

from gpudoc.runs.record import RunRecord
from gpudoc.runs.retention import plan_prune, remove
from gpudoc.runs.store import RunStore
from tests.conftest import gpudoc_cli, needs_root


def _run(store: RunStore, i: int, *, status: str = "ok", parent: str | None = None, age_days: float = 0,
         launcher: int | None = None) -> RunRecord:
    stamp = time.time() - age_days * 86400 - (100 - i)
    record = RunRecord(
        id=time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp)) + f"{i:03d}-{i:06x}", command=["true"], cwd="/",
        status=status, parent=parent, launcher_pid=launcher,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stamp)))
    store.create(record)
    return record


def test_keep_removes_the_oldest_but_never_a_running_chain(tmp_path):
    store = RunStore(tmp_path)
    old = [_run(store, i) for i in range(4)]
    # A retry chain that is still going: its first attempt is among the oldest.
    head = _run(store, 4, status="failed")
    tail = _run(store, 5, status="running", parent=head.id, launcher=os.getpid())
    newest = [_run(store, i) for i in range(6, 8)]
    plan = plan_prune(store, keep=2)
    assert plan.total == 8
    assert plan.kept_live == [head.id, tail.id]
    assert plan.remove == [r.id for r in old]
    removed = remove(store, plan.remove)
    assert removed == plan.remove
    assert store.ids() == [head.id, tail.id, *(r.id for r in newest)]


def test_older_than_counts_days_from_the_start(tmp_path):
    store = RunStore(tmp_path)
    stale = _run(store, 1, age_days=40)
    fresh = _run(store, 2, age_days=1)
    plan = plan_prune(store, older_than_days=30)
    assert plan.remove == [stale.id]
    assert fresh.id not in plan.remove


def test_a_planted_link_is_never_followed(tmp_path):
    store = RunStore(tmp_path / "home")
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    store.ensure()
    (store.root / "20200101-000000000-abcdef").symlink_to(victim, target_is_directory=True)
    _run(store, 1)
    plan = plan_prune(store, keep=1)
    assert plan.remove == ["20200101-000000000-abcdef"]
    assert remove(store, plan.remove) == []
    assert (victim / "data").read_text() == "keep me"


@needs_root
def test_another_users_records_are_never_removed(tmp_path):
    store = RunStore(tmp_path)
    theirs = _run(store, 1)
    for path in (store.run_dir(theirs.id), store.run_dir(theirs.id) / "run.json"):
        os.chown(path, 65534, 65534)
    mine = _run(store, 2)
    plan = plan_prune(store, keep=1)
    assert theirs.id not in plan.remove
    assert remove(store, [theirs.id]) == []  # even when asked
    assert store.run_dir(theirs.id).is_dir() and mine.id in store.ids()


def test_runs_prune_from_the_cli_and_keep_applied_after_each_run(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[runs]\nkeep = 2\n")
    for _ in range(3):
        assert gpudoc_cli("run", "--no-check", "--", "true", cwd=isolated_home).returncode == 0
    store = RunStore(isolated_home / ".gpudoc")
    assert len(store.ids()) == 2  # the oldest went after the third run
    dry = gpudoc_cli("runs", "prune", "--keep", "1", "--dry-run", cwd=isolated_home)
    assert dry.returncode == 0 and "would remove 1 of 2 run(s)" in dry.stdout and len(store.ids()) == 2
    assert "; 1 left" in dry.stdout  # what would be left, not what is there now
    done = gpudoc_cli("runs", "prune", "--keep", "1", cwd=isolated_home)
    assert done.returncode == 0 and "removed 1 of 2 run(s)" in done.stdout and len(store.ids()) == 1
    refused = gpudoc_cli("runs", "prune", cwd=isolated_home)
    assert refused.returncode == 2 and "--keep N and/or --older-than DAYS" in refused.stderr


def test_a_run_prunes_a_bounded_number_of_records_and_says_so(isolated_home):
    from gpudoc.runs.retention import PRUNE_PER_RUN

    (isolated_home / "gpudoc.toml").write_text("[runs]\nkeep = 5\n")
    store = RunStore(isolated_home / ".gpudoc")
    many = PRUNE_PER_RUN * 3
    for i in range(many):
        _run(store, i % 100, age_days=1 + i / 1000)  # ids in the past, one per i
    assert len(store.ids()) == many
    started = time.monotonic()
    done = gpudoc_cli("run", "--no-check", "--", "true", cwd=isolated_home)
    assert done.returncode == 0
    assert time.monotonic() - started < 30
    left = many + 1 - PRUNE_PER_RUN
    assert len(store.ids()) == left  # at most PRUNE_PER_RUN went, the oldest first
    assert (f"gpudoc: removed the {PRUNE_PER_RUN} oldest run records beyond [runs] keep = 5 "
            f"({left - 5} more go after the next runs)") in done.stderr


def test_originals_go_with_the_last_record_that_lists_them(tmp_path):
    from gpudoc.runs.edits import ORIGINALS, entry, keep_original

    store = RunStore(tmp_path)
    old, shared, new = (keep_original(store, data) for data in (b"old bytes", b"shared bytes", b"new bytes"))
    path = tmp_path / "gpudoc.toml"
    runs = [_run(store, i) for i in range(3)]
    runs[0].file_edits = [entry(path, b"old bytes", b"x"), entry(path, b"shared bytes", b"y")]
    runs[2].file_edits = [entry(path, b"shared bytes", b"y"), entry(path, b"new bytes", b"z")]
    for record in runs:
        store.save(record)
    assert remove(store, plan_prune(store, keep=1).remove) == [runs[0].id, runs[1].id]
    assert sorted(p.name for p in (store.home / ORIGINALS).iterdir()) == sorted([shared, new])
    assert old not in {p.name for p in (store.home / ORIGINALS).iterdir()}
