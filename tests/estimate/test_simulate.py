"""The simulation imports the project's code as the user: the factory's module, its packages, the
files beside it, and every top-level module of the project directory (first on ``sys.path``, they
shadow torch). Any of them that another user owns or can write refuses the simulation in one line
(SPEC "Trust"); the code is never imported."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from gpudoc.estimate.simulate import check_factory_trust
from gpudoc.trust import Refused
from tests.conftest import gpudoc_cli

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")
PROFILE = """\
[train]
micro_batch_size = 2
max_seq_len = 16
[model]
factory = "models.tiny:make"
layers = 2
hidden = 64
heads = 2
ffn = 128
vocab = 100
[estimate]
simulate = true
"""


def _project(folder):
    """A project whose factory module leaves a marker when imported."""
    marker = folder / "IMPORTED"
    (folder / "models").mkdir()
    (folder / "models" / "__init__.py").write_text("")
    (folder / "models" / "tiny.py").write_text(textwrap.dedent(f"""\
        open({str(marker)!r}, "a").write("imported\\n")
        def make(micro_batch_size=1):
            raise SystemExit("not a model")
    """))
    (folder / "gpudoc.toml").write_text(PROFILE)
    return marker


def test_the_users_own_project_passes(tmp_path):
    _project(tmp_path)
    check_factory_trust("models.tiny:make", tmp_path, {})  # nothing raised


@pytest.mark.parametrize("planted", ["models/tiny.py", "models/__init__.py", "models/layers.py", "torch.py",
                                     "transformers/__init__.py"])
def test_any_file_the_import_can_run_that_others_can_write_refuses_it(tmp_path, planted):
    _project(tmp_path)
    path = tmp_path / planted
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        path.write_text("")  # beside the factory's module, or shadowing torch / transformers
    os.chmod(path, 0o666)
    with pytest.raises(Refused) as info:
        check_factory_trust("models.tiny:make", tmp_path, {})
    assert str(info.value).startswith(f'[model] factory = "models.tiny:make": {path} (owner ')
    assert "can be written by every user (mode 0666): refused, the simulation would import it as you" in str(info.value)
    assert info.value.file == str(path) and info.value.key == "model.factory"


def test_a_module_found_on_the_jobs_pythonpath_is_held_to_the_rule_too(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "shared_models.py").write_text("def make(): pass\n")
    os.chmod(lib / "shared_models.py", 0o666)
    with pytest.raises(Refused, match="shared_models.py"):
        check_factory_trust("shared_models:make", tmp_path, {"PYTHONPATH": str(lib)})
    check_factory_trust("json:loads", tmp_path, {"PYTHONPATH": str(lib)})  # an installed module: not the project's


@needs_root
def test_a_factory_module_another_user_planted_is_never_imported(tmp_path):
    marker = _project(tmp_path)
    os.chown(tmp_path / "models" / "tiny.py", NOBODY, NOBODY)
    for command in (["estimate", "--simulate", "--python", sys.executable], ["check", "--python", sys.executable]):
        done = gpudoc_cli(*command, cwd=tmp_path, timeout=180)
        assert not marker.exists(), command
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"{tmp_path / 'models' / 'tiny.py'} belongs to nobody, not to you" in done.stderr
