"""Run by path in the job's interpreter: ``PYTHON .../gpudoc/readhelper/run.py``, one JSON request on stdin.

Loads ``main.py`` beside it under a name of its own (not through ``gpudoc``, which that interpreter
may not have) and keeps this directory off ``sys.path``: the job's interpreter imports the installed
frameworks, never a module of this directory by accident.
"""

from __future__ import annotations

import importlib.util
import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.util.spec_from_file_location("gpudoc_readhelper_main", os.path.join(here, "main.py"))
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load the reader helper from {here}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.exit(module.main())
