"""Run by path in the job's interpreter: ``PYTHON .../gpudoc/simhelper/run.py``, spec lines on stdin.

Loads this directory as the package ``gpudoc_simhelper`` (not through ``gpudoc``, which that
interpreter may not have, or have in another version) and keeps the directory off ``sys.path`` so
that its module names never shadow the project's own (a factory's ``build`` or ``step``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def _load() -> object:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.util.spec_from_file_location("gpudoc_simhelper", os.path.join(here, "__init__.py"),
                                                  submodule_search_locations=[here])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the simulation helper from {here}")
    package = importlib.util.module_from_spec(spec)
    sys.modules["gpudoc_simhelper"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("gpudoc_simhelper.main")


if __name__ == "__main__":
    sys.exit(_load().main())  # type: ignore[attr-defined]
