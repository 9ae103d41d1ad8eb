"""The chain of edits: fingerprints, the originals kept in the store, and where a chain begins."""

from __future__ import annotations

from gpudoc.runs.edits import Edit, edit_chain, fingerprint, keep_original, original


def _edit(old: str | None, new: str, at: float, path: str = "/p/cfg.yaml") -> Edit:
    return Edit(path, fingerprint(old.encode()) if old is not None else None, fingerprint(new.encode()), at,
                f"run{at:g}", ())


def test_a_chain_runs_back_through_edits_that_start_where_the_last_ended():
    edits = [_edit("a", "b", 1), _edit("b", "c", 2), _edit("c", "d", 3), _edit("x", "y", 4, path="/p/other")]
    assert [e.run_id for e in edit_chain(edits, "/p/cfg.yaml")] == ["run1", "run2", "run3"]


def test_a_hand_edit_in_between_starts_a_new_chain():
    # a -> b by gpudoc, then b -> h by hand, then h -> i by gpudoc: the user's h is the start.
    edits = [_edit("a", "b", 1), _edit("h", "i", 2)]
    assert [e.run_id for e in edit_chain(edits, "/p/cfg.yaml")] == ["run2"]


def test_a_restored_file_edited_again_starts_a_new_chain():
    # a -> b, restored to a (not an edit), then a -> b again: only the newest edit is the chain.
    edits = [_edit("a", "b", 1), _edit("a", "b", 2)]
    assert [e.run_id for e in edit_chain(edits, "/p/cfg.yaml")] == ["run2"]


def test_a_created_file_has_no_original():
    (edit,) = edit_chain([_edit(None, "new", 1)], "/p/cfg.yaml")
    assert edit.old_sha256 is None


def test_originals_are_kept_private_and_checked_by_content(store, tmp_path):
    digest = keep_original(store, b"batch_size: 8\n")
    kept = store.home / "originals" / digest
    assert kept.read_bytes() == b"batch_size: 8\n" and kept.stat().st_mode & 0o777 == 0o600
    assert original(store.home, digest, tmp_path / "cfg.yaml") == b"batch_size: 8\n"
    kept.write_bytes(b"tampered\n")  # a file that does not hold what its name says is no original
    assert original(store.home, digest, tmp_path / "cfg.yaml") is None
    (tmp_path / "cfg.yaml.gpudoc.bak").write_bytes(b"batch_size: 8\n")  # the backup beside, when it does
    assert original(store.home, digest, tmp_path / "cfg.yaml") == b"batch_size: 8\n"


def test_a_link_planted_in_the_originals_is_replaced_not_followed(store, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    digest = fingerprint(b"data\n")
    (store.home / "originals").mkdir()
    (store.home / "originals" / str(digest)).symlink_to(victim)
    keep_original(store, b"data\n")
    assert victim.read_bytes() == b"keep me\n"
    assert not (store.home / "originals" / str(digest)).is_symlink()


def test_an_originals_folder_planted_as_a_link_is_never_written_through(tmp_path):
    import pytest

    from gpudoc.runs.edits import ORIGINALS, keep_original
    from gpudoc.runs.store import RunStore

    store = RunStore(tmp_path / ".gpudoc")
    store.ensure()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store.home / ORIGINALS).symlink_to(elsewhere)
    with pytest.raises(OSError, match="originals"):
        keep_original(store, b"the profile before an edit")
    assert list(elsewhere.iterdir()) == []
