"""Pruning run records: the oldest go, a live chain and other users' records stay, links are not followed."""

from __future__ import annotations

import os
import time
from pathlib import Path

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


def _store_and_victim(tmp_path: Path) -> tuple[RunStore, Path]:
    """A run store, and a folder of someone's data for a planted link to point at."""
    store = RunStore(tmp_path / "home")
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    store.ensure()
    return store, victim


def test_a_planted_link_is_never_followed(tmp_path):
    store, victim = _store_and_victim(tmp_path)
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


def _unlisted(store: RunStore, count: int, *, age_days: float = 0) -> list[str]:
    """``count`` file states kept for edits no record lists (as `fix --log --apply` keeps them),
    the first the oldest."""
    from gpudoc.runs.edits import keep_original, unlisted_folder

    digests = []
    for i in range(count):
        digest = keep_original(store, f"edited by hand {age_days} days ago, take {i}\n".encode(), listed=False)
        stamp = time.time() - age_days * 86400 - (count - i)
        os.utime(unlisted_folder(store.home) / digest, (stamp, stamp))
        digests.append(digest)
    return digests


def test_the_states_kept_for_edits_no_record_lists_go_by_the_records_rule(tmp_path):
    from gpudoc.runs.edits import original, unlisted_folder
    from gpudoc.runs.retention import plan_unlisted, remove_unlisted

    store = RunStore(tmp_path)
    stale = _unlisted(store, 2, age_days=40)
    fresh = _unlisted(store, 3)
    assert original(store.home, fresh[0], tmp_path / "gpudoc.toml") is not None  # found where it is kept
    assert plan_unlisted(store, keep=3).remove == stale
    assert plan_unlisted(store, older_than_days=30).remove == stale
    bounded = plan_unlisted(store, keep=0, at_most=3)
    assert bounded.remove == [*stale, fresh[0]] and bounded.later == 2
    assert remove_unlisted(store, bounded.remove) == bounded.remove
    assert sorted(p.name for p in unlisted_folder(store.home).iterdir()) == sorted(fresh[1:])


def test_a_run_prunes_them_bounded_and_says_so(tmp_path):
    from gpudoc.runs.edits import unlisted_folder
    from gpudoc.runs.retention import PRUNE_PER_RUN, prune_after_run

    store = RunStore(tmp_path)
    kept = _unlisted(store, PRUNE_PER_RUN + 7)
    said = prune_after_run(store, 5)
    assert said == (f"gpudoc: removed the {PRUNE_PER_RUN} oldest file state(s) kept before edits no run lists "
                    f"(fix --log --apply, profile new --force) beyond [runs] keep = 5, from "
                    f"{unlisted_folder(store.home)} (2 more go later)")
    assert sorted(p.name for p in unlisted_folder(store.home).iterdir()) == sorted(kept[PRUNE_PER_RUN:])
    assert prune_after_run(store, 5) is not None and prune_after_run(store, 5) is None  # the rest, then none


def test_a_planted_link_in_place_of_their_folder_is_never_followed(tmp_path):
    from gpudoc.runs.edits import ORIGINALS, UNLISTED
    from gpudoc.runs.retention import plan_unlisted

    store, victim = _store_and_victim(tmp_path)
    (store.home / ORIGINALS).mkdir()
    (store.home / ORIGINALS / UNLISTED).symlink_to(victim, target_is_directory=True)
    assert plan_unlisted(store, keep=0).remove == []
    assert prune_runs_cli(store.home, "--older-than", "0").returncode == 0
    assert (victim / "data").read_text() == "keep me"
    # A link planted among them is no state gpudoc kept: neither it nor what it points at goes.
    (store.home / ORIGINALS / UNLISTED).unlink()
    _unlisted(store, 1, age_days=2)
    (store.home / ORIGINALS / UNLISTED / "planted").symlink_to(victim / "data")
    assert prune_runs_cli(store.home, "--older-than", "1").returncode == 0
    assert [p.name for p in (store.home / ORIGINALS / UNLISTED).iterdir()] == ["planted"]
    assert (victim / "data").read_text() == "keep me"


def prune_runs_cli(home, *args):
    return gpudoc_cli("runs", "prune", *args, env={"GPUDOC_HOME": str(home)})


def test_runs_prune_removes_them_with_the_records_and_says_so(tmp_path):
    from gpudoc.runs.edits import unlisted_folder

    store = RunStore(tmp_path)
    old = _unlisted(store, 2, age_days=40)
    young = _unlisted(store, 1)
    dry = prune_runs_cli(tmp_path, "--older-than", "30", "--dry-run")
    assert dry.returncode == 0 and "would remove 2 file state(s) kept before edits no run lists" in dry.stdout
    assert len(list(unlisted_folder(tmp_path).iterdir())) == 3
    done = prune_runs_cli(tmp_path, "--older-than", "30", "--json")
    assert done.returncode == 0, done.stderr
    import json

    assert json.loads(done.stdout)["removed_unlisted"] == [str(unlisted_folder(tmp_path) / d) for d in old]
    assert [p.name for p in unlisted_folder(tmp_path).iterdir()] == young
