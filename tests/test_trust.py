"""The one trust rule: owned by the user (or root), writable by nobody else, links followed only
where meant, and a line that names the file and its owner.

Giving a file another owner needs root (CI runs as root): "another user" is uid 65534 (nobody)."""

from __future__ import annotations

import os

import pytest

from gpudoc.trust import owner_name, untrusted

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")
NOBODY = 65534
UNNAMED = 4242424  # a uid no user name belongs to


def _file(path, mode=0o644):
    path.write_text("x = 1\n")
    os.chmod(path, mode)
    return path


def test_the_users_own_file_and_a_missing_one_pass(tmp_path):
    assert untrusted(_file(tmp_path / "mine.toml")) is None
    assert untrusted(tmp_path / "absent.toml") is None  # nothing to distrust: the caller says it is missing


@needs_root
def test_another_users_file_is_named_with_its_owner(tmp_path):
    planted = _file(tmp_path / "gpudoc.toml")
    os.chown(planted, NOBODY, NOBODY)
    problem = untrusted(planted)
    assert problem is not None and problem.owner == "nobody"
    assert str(problem) == f"{planted} belongs to nobody, not to you ({owner_name(os.geteuid())})"
    os.chown(planted, UNNAMED, UNNAMED)
    assert untrusted(planted).owner == f"uid {UNNAMED}"  # no user name: the uid


def test_a_file_every_user_can_write_is_nobodys_to_trust(tmp_path):
    shared = _file(tmp_path / "gpudoc.toml", 0o666)
    problem = untrusted(shared)
    assert problem is not None and "can be written by every user (mode 0666)" in str(problem)
    assert problem.remedy == f"chmod o-w {shared}"
    folder = tmp_path / "runs"
    folder.mkdir()
    os.chmod(folder, 0o1777)  # sticky or not: others may add entries
    assert "every user" in str(untrusted(folder))


@needs_root
def test_group_writable_is_fine_only_for_the_users_own_group_or_when_asked(tmp_path):
    team = _file(tmp_path / "team.toml", 0o664)
    os.chown(team, os.geteuid(), NOBODY)  # a group the user's private group is not
    problem = untrusted(team)
    assert problem is not None and "can be written by group nogroup (mode 0664)" in str(problem)
    assert untrusted(team, group_ok=True) is None  # an explicit GPUDOC_HOME with [run] shared = true
    os.chown(team, os.geteuid(), os.getegid())  # root's own group, named after it, nobody else in it
    assert untrusted(team) is None


@needs_root
def test_a_link_is_followed_only_when_meant_and_every_hop_is_held_to_the_rule(tmp_path):
    theirs = _file(tmp_path / "theirs.toml")
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "gpudoc.toml"
    link.symlink_to(theirs)
    problem = untrusted(link)
    assert problem is not None and f"links to {theirs}, which belongs to nobody" in str(problem)
    mine = _file(tmp_path / "mine.toml")
    link.unlink()
    link.symlink_to(mine)
    assert untrusted(link) is None  # the user's own link to the user's own file
    problem = untrusted(link, follow_links=False)
    assert problem is not None and "is a symbolic link" in str(problem)
    os.lchown(link, NOBODY, NOBODY)  # a link another user planted, to a file of the user's
    assert "belongs to nobody" in str(untrusted(link))


def test_a_loop_of_links_is_an_answer_not_a_hang(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    problem = untrusted(tmp_path / "a")
    assert problem is not None and "chain of more than" in str(problem)
