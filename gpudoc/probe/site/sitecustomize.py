# gpudoc's probe, put first on the job's PYTHONPATH by `gpudoc run` (never on gpudoc's own).
# Kept to syntax any Python 3 parses: an old interpreter must not print "Error in sitecustomize".
# At start-up it only places a finder on sys.meta_path that answers nothing: the agent is loaded by
# file path (nothing in the script's directory can shadow it) at the job's first import of a module
# its knobs come through (argparse, a config parser, torch), before that module runs. A Python that
# imports none of them (a tool, `python -c pass`) pays one name lookup an import, nothing else.
# Then the user's own sitecustomize, which this file shadows, runs exactly once.
import os
import sys

# What a training job's knobs come through; a submodule's import always follows its package's.
_GPUDOC_PROBE_TRIGGERS = frozenset(("argparse", "torch", "json", "yaml", "ruamel", "tomllib", "tomli", "toml",
                                    "omegaconf"))


class _GpudocProbeLoader:
    def __init__(self, agent):
        self.agent = agent

    def find_spec(self, name, path=None, target=None):
        if name not in _GPUDOC_PROBE_TRIGGERS:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        _gpudoc_probe_load(self.agent)
        # The import in progress, found again now that the probe's own finders are in place.
        try:
            import importlib.util

            return importlib.util.find_spec(name)
        except Exception:
            return None  # the import system looks again, and says what it finds itself


def _gpudoc_probe_load(agent_path):
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("_gpudoc_probe_agent", agent_path)
        agent = importlib.util.module_from_spec(spec)
        sys.modules["_gpudoc_probe_agent"] = agent
        spec.loader.exec_module(agent)
        agent.install()
    except Exception:
        pass  # a probe that cannot start observes nothing; the job runs as it would without it


def _gpudoc_probe_start():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("GPUDOC_PROBE_DIR"):
        agent = os.path.join(os.path.dirname(here), "agent.py")
        if _GPUDOC_PROBE_TRIGGERS.intersection(sys.modules):  # imported already (a .pth file did)
            _gpudoc_probe_load(agent)
        else:
            sys.meta_path.insert(0, _GpudocProbeLoader(agent))
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
