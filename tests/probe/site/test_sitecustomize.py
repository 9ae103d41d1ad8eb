"""The probe's start-up (no torch, no job: plain interpreters, each a few tens of milliseconds): a
Python that never imports what the probe watches loads nothing of it; the first such import loads it
before that module runs."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys

from tests.conftest import REPO

SITE = REPO / "gpudoc" / "probe" / "site"


def _python(code: str, probe_dir: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUDOC_PROBE_DIR")}
    if probe_dir:
        env.update(PYTHONPATH=str(SITE), GPUDOC_PROBE_DIR=probe_dir)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def test_a_python_that_imports_nothing_the_probe_watches_loads_nothing_of_it(tmp_path):
    # Measured: `python -c pass` took 15.7 ms more when the observers loaded at every start-up.
    code = "import sys; print(sorted(sys.modules))"
    bare = set(ast.literal_eval(_python(code, None).splitlines()[0]))
    probed = set(ast.literal_eval(_python(code, str(tmp_path / "probe")).splitlines()[0]))
    assert probed - bare == {"sitecustomize"}
    assert not (tmp_path / "probe").exists()


def test_the_first_watched_import_loads_the_probe_before_that_module_runs(tmp_path):
    code = ("import sys; before = '_gpudoc_probe_agent' in sys.modules\n"
            "import argparse\n"
            "parser = argparse.ArgumentParser(); parser.add_argument('--batch', type=int)\n"
            "print(before, '_gpudoc_probe_agent' in sys.modules, parser.parse_args(['--batch', '4']).batch,\n"
            "      argparse.Namespace.__init__.__qualname__)")
    assert _python(code, str(tmp_path / "probe")).split() == ["False", "True", "4", "observe_parsers.<locals>.init"]
    # A config parser first, then argparse: both observed (the finders the probe places wait for theirs).
    code = ("import json, sys; loaded = '_gpudoc_probe_agent' in sys.modules\nimport argparse\n"
            "print(loaded, argparse.Namespace.__init__.__qualname__)")
    assert _python(code, str(tmp_path / "probe")).split() == ["True", "observe_parsers.<locals>.init"]
    # A module the job lacks is still its own ImportError, the probe loaded all the same.
    if importlib.util.find_spec("tomli") is None:
        code = "import sys\ntry:\n    import tomli\nexcept ImportError as e:\n    print(e.name, '_gpudoc_probe_agent' in sys.modules)"
        assert _python(code, str(tmp_path / "probe")).split() == ["tomli", "True"]
