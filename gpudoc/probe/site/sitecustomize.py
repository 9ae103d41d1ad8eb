# gpudoc's probe, put first on the job's PYTHONPATH by `gpudoc run` (never on gpudoc's own).
# Kept to syntax any Python 3 parses: an old interpreter must not print "Error in sitecustomize".
# It loads the agent by file path (nothing in the script's directory can shadow it), then runs the
# user's own sitecustomize, which this file shadows, exactly once.
import os
import sys


def _gpudoc_probe_start():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("_gpudoc_probe_agent",
                                                      os.path.join(os.path.dirname(here), "agent.py"))
        agent = importlib.util.module_from_spec(spec)
        sys.modules["_gpudoc_probe_agent"] = agent
        spec.loader.exec_module(agent)
        agent.install()
    except Exception:
        pass  # a probe that cannot start observes nothing; the job runs as it would without it
    # The user's own sitecustomize: the next one on sys.path after this directory.
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError as exc:
        if getattr(exc, "name", None) != "sitecustomize":
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        sys.path[:] = saved


_gpudoc_probe_start()
del _gpudoc_probe_start
