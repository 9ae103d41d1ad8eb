"""The simulation imports the project's code as the user: the factory's module, its packages, the
files beside it, and every top-level module of the project directory (first on ``sys.path``, they
shadow torch). Any of them that another user owns or can write refuses the simulation in one line
(SPEC "Trust"); the code is never imported."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from gpudoc.estimate.simulate import MARKER, check_factory_trust
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


# The simulation helper's protocol is input too: a job's interpreter (or what its sitecustomize,
# its factory or a planted cache file make it say) answers anything, and the estimate falls back to
# the formula in one line naming what was wrong, never a traceback.
CONFIG_PROFILE = ('[train]\nmicro_batch_size = 2\nmax_seq_len = 64\n[model]\nhf_config = "config.json"\n'
                  "[estimate]\nsimulate = true\ntimeout_s = 2\n")
STEP = {"peak_bytes": 1000, "stage": "backward", "breakdown": {"weights": 1000}, "start_bytes": 0,
        "stage_peaks": {"backward": 1000}}


def _estimate_with(tmp_path, helper_body: str) -> dict:
    import json

    from gpudoc.commands.estimate import estimate_command
    from tests.conftest import captured_workspace

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                      "intermediate_size": 128, "num_hidden_layers": 2,
                                                      "num_attention_heads": 4, "vocab_size": 100}))
    (tmp_path / "gpudoc.toml").write_text(CONFIG_PROFILE)
    python = tmp_path / "fakepython"
    python.write_text(f"#!{sys.executable}\nimport json, os, sys, subprocess\n"
                      "if sys.argv[1:2] == ['-c']:\n"
                      "    print(json.dumps({'python': '3.11', 'torch': '2.5', 'transformers': '4.50'}))\n"
                      "    sys.exit()\n"
                      f"MARK = {MARKER!r}\n"  # what starts an answer line, as the real helper writes it
                      "spec = json.loads(sys.stdin.readline())\n" + textwrap.dedent(helper_body))
    python.chmod(0o755)
    ws = captured_workspace(tmp_path, environ={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert estimate_command(ws, as_json=True, simulate=True, python=str(python)) == 0
    return json.loads(ws.console.out.getvalue())


@pytest.mark.parametrize("answer, named", [
    ({"ok": True}, "runs"),
    ({"ok": True, "runs": [{"micro_batch_size": 2}, {"micro_batch_size": 3}]}, "runs[0].first_step = null"),
    ({"ok": True, "runs": [{"micro_batch_size": 2, "first_step": STEP, "steady_state": {**STEP, "peak_bytes": "1"}},
                           {"micro_batch_size": 3, "steady_state": STEP}]}, "runs[0].steady_state.peak_bytes"),
    ({"ok": True, "runs": [{"micro_batch_size": 2, "first_step": STEP, "steady_state": STEP}]}, "runs"),
    ({"ok": True, "runs": [{"micro_batch_size": 2, "first_step": STEP, "steady_state": STEP},
                           {"micro_batch_size": 3, "steady_state": STEP}], "notes": [None]}, "notes"),
    ({"ok": "yes"}, "ok"),
    ({"ok": False, "reason": ["a", "list"]}, "reason"),
    ([1, 2], "not a JSON object"),
])
def test_a_helper_answer_of_the_wrong_shape_is_one_line_naming_it(tmp_path, answer, named):
    doc = _estimate_with(tmp_path, f"print(MARK + json.dumps({answer!r}))\n")
    assert doc["source"] == "formula"
    note = doc["notes"][0]
    assert note.startswith("simulation unavailable, the formula answers: the simulation helper's answer")
    assert named in note and "\n" not in note and len(note) < 400, note


def test_what_the_projects_code_prints_is_never_taken_for_the_answer(tmp_path):
    # A factory (or a sitecustomize) printing JSON of its own: only the marked line answers.
    doc = _estimate_with(tmp_path, "print(json.dumps({'ok': True, 'runs': []}))\n"
                                   "print(MARK + json.dumps({'ok': False, 'reason': 'the helper said so'}))\n"
                                   "print(json.dumps({'ok': True}))\n")
    assert doc["source"] == "formula" and doc["notes"][0].endswith(": the helper said so")


def test_a_cached_answer_of_the_wrong_shape_is_not_an_answer(tmp_path):
    import json

    good = {"ok": True, "runs": [{"micro_batch_size": 2, "first_step": STEP, "steady_state": STEP},
                                 {"micro_batch_size": 3, "steady_state": STEP}]}
    assert _estimate_with(tmp_path, f"print(MARK + json.dumps({good!r}))\n")["source"] == "simulation"
    cached = list((tmp_path / "cache" / "gpudoc" / "simulate").glob("*.json"))
    assert len(cached) == 1
    cached[0].write_text(json.dumps({"ok": True}))  # planted, or a helper of another version
    doc = _estimate_with(tmp_path, "print(MARK + json.dumps({'ok': False, 'reason': 'asked again'}))\n")
    assert doc["source"] == "formula" and doc["notes"][0].endswith("asked again")


def test_a_huge_answer_and_a_huge_reason_cost_one_short_line(tmp_path):
    doc = _estimate_with(tmp_path, "sys.stdout.write('x' * 30_000_000 + '\\n')\n"
                                   "print(MARK + json.dumps({'ok': False, 'reason': 'why ' * 200_000}))\n")
    note = doc["notes"][0]
    assert doc["source"] == "formula" and note.startswith("simulation unavailable, the formula answers: why why")
    assert len(note) < 400 and note.endswith("…")


def test_a_hanging_factorys_child_ends_with_the_helper_at_its_limit(tmp_path):
    from tests.procs.test_bounded import gone_soon

    pidfile = tmp_path / "child"
    doc = _estimate_with(tmp_path, f"child = subprocess.Popen(['sleep', '300'])\n"
                                   f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
                                   "import time; time.sleep(300)\n")
    assert doc["source"] == "formula" and "longer than 2 s" in doc["notes"][0]
    # The profile sets the limit: the note names it, and does not tell the user to set it.
    assert "the limit [estimate] timeout_s sets" in doc["notes"][0] and "raises" not in doc["notes"][0]
    child = int(pidfile.read_text())
    assert gone_soon(child), f"the factory's child {child} lives on after the helper's limit"
