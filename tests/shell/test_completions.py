"""The completion scripts in the real shells: subcommands, switches, profile names, run ids, the
job's command line after ``gpudoc run --``. Every case runs in bash, zsh and fish."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpudoc import shellcomplete
from gpudoc.cli.completion import command_tree
from tests.conftest import REPO
from tests.shell.drivers import DRIVERS, shell_env

pytestmark = pytest.mark.slow
SHELLS = sorted(DRIVERS)


@pytest.fixture
def project(isolated_home, tmp_path):
    """A working directory with project profiles, user profiles and two run records."""
    work = isolated_home
    (work / ".gpudoc" / "profiles").mkdir(parents=True)
    (work / ".gpudoc" / "profiles" / "my-box.toml").write_text("[gpu]\ncount = 1\n")
    (work / ".gpudoc" / "profiles" / "notes.txt").write_text("not a profile\n")
    config = tmp_path / "config"
    (config / "gpudoc" / "profiles").mkdir(parents=True)
    (config / "gpudoc" / "profiles" / "user-wide.toml").write_text("[gpu]\ncount = 2\n")
    runs = work / ".gpudoc" / "runs"
    for run_id in ("20260101-090000-aaaaaa", "20260102-100000-bbbbbb"):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "run.json").write_text(json.dumps({"id": run_id}))
    (runs / "20260103-110000-cccccc").mkdir()  # being created: no record yet
    (work / "train_script.py").write_text("print('hi')\n")
    (work / "nvidia-smi.xml").write_text("<nvidia_smi_log/>\n")
    env = shell_env({"XDG_CONFIG_HOME": str(config)})
    return work, env


def complete(shell: str, lines: list[str], project) -> list[set[str]]:
    work, env = project
    return [set(batch) for batch in DRIVERS[shell](lines, cwd=work, env=env)]


def expected_profiles(project) -> set[str]:
    work, env = project
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = env["XDG_CONFIG_HOME"]
    try:
        return set(shellcomplete.profile_names(str(work)))
    finally:
        os.environ["XDG_CONFIG_HOME"] = old or ""


@pytest.mark.parametrize("shell", SHELLS)
def test_subcommands(shell, project):
    tree = command_tree()
    every, prefix, nested = complete(shell, ["gpudoc ", "gpudoc ch", "gpudoc profile "], project)
    assert every == set(tree.children)
    assert prefix == {"check"}
    assert nested == set(tree.children["profile"].children)


@pytest.mark.parametrize("shell", SHELLS)
def test_switches_of_a_subcommand(shell, project):
    show, new = complete(shell, ["gpudoc profile show --", "gpudoc profile new --f"], project)
    assert {"--json", "--help"} <= show
    assert "--from-gpu" not in show  # a switch of a sibling command
    assert new == {"--from-gpu", "--from-run", "--force"}


@pytest.mark.parametrize("shell", SHELLS)
def test_profile_names_from_project_user_and_shipped_dirs(shell, project):
    names = expected_profiles(project)
    # the reference really spans the three directories
    assert {"my-box", "user-wide"} <= names
    assert names - {"my-box", "user-wide"}, "no shipped profile found in profiles/"
    lines = ["gpudoc profile show ", "gpudoc profile show my"]
    # every switch that takes a profile, in every command that has one
    switch_lines = [
        f"gpudoc {' '.join(node.path)} {name} "
        for node in command_tree().walk()
        for sw in node.switches if sw.value == "profiles"
        for name in sw.names
    ]
    results = complete(shell, lines + switch_lines, project)
    assert results[0] == names
    assert results[1] == {"my-box"}
    for line, result in zip(switch_lines, results[2:]):
        assert result == names, line


@pytest.mark.parametrize("shell", SHELLS)
def test_run_ids_for_fix_and_logs(shell, project):
    fix, logs, prefix = complete(shell, ["gpudoc fix ", "gpudoc logs ", "gpudoc logs 20260102"],
                                 project)
    ids = {"20260101-090000-aaaaaa", "20260102-100000-bbbbbb"}
    assert fix == ids
    assert logs == ids
    assert prefix == {"20260102-100000-bbbbbb"}


@pytest.mark.parametrize("shell", SHELLS)
def test_run_ids_follow_gpudoc_home(shell, project, tmp_path):
    work, env = project
    home = tmp_path / "elsewhere"
    (home / "runs" / "20270101-000000-dddddd").mkdir(parents=True)
    (home / "runs" / "20270101-000000-dddddd" / "run.json").write_text("{}")
    env = {**env, "GPUDOC_HOME": str(home)}
    [result] = DRIVERS[shell](["gpudoc fix "], cwd=work, env=env)
    assert set(result) == {"20270101-000000-dddddd"}


@pytest.mark.parametrize("shell", SHELLS)
def test_run_ids_are_found_from_a_subdirectory_as_gpudoc_finds_them(shell, project):
    work, env = project
    deeper = work / "src" / "models"
    deeper.mkdir(parents=True)
    [result] = DRIVERS[shell](["gpudoc fix "], cwd=deeper, env=env)
    assert set(result) == {"20260101-090000-aaaaaa", "20260102-100000-bbbbbb"}
    assert set(result) == set(shellcomplete.run_ids(str(deeper)))
    # A nested repository is a project of its own: the search stops at its root.
    nested = work / "vendor" / "lib"
    (work / "vendor" / ".git").mkdir(parents=True)
    nested.mkdir(parents=True)
    [inside] = DRIVERS[shell](["gpudoc fix "], cwd=nested, env=env)
    assert set(inside) == set() == set(shellcomplete.run_ids(str(nested)))


@pytest.mark.parametrize("shell", SHELLS)
def test_project_profile_names_are_found_from_a_subdirectory_as_gpudoc_finds_them(shell, project):
    work, env = project
    deeper = work / "src" / "models"
    deeper.mkdir(parents=True)
    [result] = DRIVERS[shell](["gpudoc run -p my"], cwd=deeper, env=env)
    assert set(result) == {"my-box"}


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_after_double_dash_completes_as_the_shell_would(shell, project):
    command, argument, no_gpudoc_switches, without_dashes = complete(shell, [
        "gpudoc run -- python",
        "gpudoc run -- python3 train_s",
        "gpudoc run -- true --",
        "gpudoc run python3 train_s",
    ], project)
    assert "python3" in command
    assert argument == {"train_script.py"}
    assert "--help-all" not in no_gpudoc_switches
    assert without_dashes == {"train_script.py"}


@pytest.mark.parametrize("shell", SHELLS)
def test_value_hints(shell, project):
    shells, snapshot = complete(shell, ["gpudoc completions ", "gpudoc profile new --snapshot nv"],
                                project)
    assert shells == {"bash", "zsh", "fish"}
    assert snapshot == {"nvidia-smi.xml"}


def _fake_install(root: Path, shebang: str) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "gpudoc"
    exe.write_text(f"#!{shebang}\nimport sys\nsys.exit(0)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.mark.parametrize("shell", SHELLS)
def test_shipped_profiles_of_an_installed_gpudoc(shell, project, tmp_path):
    """A console script in PREFIX/bin finds PREFIX/share/gpudoc/profiles (pyproject data-files)."""
    work, env = project
    prefix = tmp_path / "prefix"
    bin_dir = _fake_install(prefix, "/nonexistent/python")
    (prefix / "share" / "gpudoc" / "profiles").mkdir(parents=True)
    (prefix / "share" / "gpudoc" / "profiles" / "from-prefix.toml").write_text("")
    env = shell_env({"XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}, path_first=[bin_dir])
    [result] = DRIVERS[shell](["gpudoc profile show "], cwd=work, env=env)
    assert set(result) == {"my-box", "user-wide", "from-prefix"}


@pytest.mark.parametrize("shell", SHELLS)
def test_shipped_profiles_asked_of_the_console_scripts_python(shell, project, tmp_path):
    """An unrecognised layout: the script's own interpreter says where the shipped profiles are."""
    work, env = project
    bin_dir = _fake_install(tmp_path / "odd", sys.executable)
    env = shell_env({"XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}, path_first=[bin_dir])
    [result] = DRIVERS[shell](["gpudoc profile show "], cwd=work, env=env)
    shipped = {p.stem for p in (REPO / "profiles").glob("*.toml")}
    assert shipped
    assert set(result) == {"my-box", "user-wide"} | shipped


@pytest.mark.parametrize("shell", SHELLS)
def test_switch_value_after_equals_sign(shell, project):
    """--profile=my<TAB> completes the value in the same word."""
    [result] = complete(shell, ["gpudoc profile new x --snapshot=nv"], project)
    # fish offers the whole word, bash and zsh the value part
    assert {r.split("=", 1)[-1] for r in result} == {"nvidia-smi.xml"}


@pytest.mark.parametrize("shell", SHELLS)
def test_fix_takes_several_run_ids(shell, project):
    [result] = complete(shell, ["gpudoc fix 20260101-090000-aaaaaa 2026"], project)
    assert result == {"20260101-090000-aaaaaa", "20260102-100000-bbbbbb"}


def test_bash_hands_the_command_to_bash_completions_command_offset(project):
    """With bash-completion loaded, its _command_offset completes the job (e.g. torchrun's own
    completion when the user has one); gpudoc passes the index where the command starts."""
    from tests.shell.drivers import bash_complete

    work, env = project
    stub = '_command_offset() { COMPREPLY=("offset:$1:${COMP_WORDS[$1]}"); }'
    results = bash_complete(["gpudoc run --json -- torchrun --nproc", "gpudoc run -p x python3 "],
                            cwd=work, env=env, prelude=stub)
    assert results == [["offset:4:torchrun"], ["offset:4:python3"]]


def test_bash_profile_switch_also_takes_a_file(project):
    from tests.shell.drivers import bash_complete

    work, env = project
    (work / "configs").mkdir()
    (work / "configs" / "big.toml").write_text("")
    [result] = bash_complete(["gpudoc profile show ./configs/"], cwd=work, env=env)
    assert result == ["./configs/big.toml"]


def test_bash_with_the_real_bash_completion_framework(project):
    """Loaded the way a user's ~/.bashrc loads it (bin/test installs bash-completion)."""
    from tests.shell.drivers import bash_complete

    work, env = project
    framework = Path("/usr/share/bash-completion/bash_completion")
    assert framework.is_file(), "bash-completion is not installed (bin/test installs it)"
    results = bash_complete([
        "gpudoc run -- python",
        "gpudoc run --json -- python3 train_s",
        "gpudoc check -p my",
        "gpudoc fix 20260102",
    ], cwd=work, env=env, prelude=f"source {framework}")
    assert "python3" in results[0]
    assert results[1] == ["train_script.py"]
    assert results[2] == ["my-box"]
    assert results[3] == ["20260102-100000-bbbbbb"]
