"""Start-up: modules plumbum imports at the top but uses only in code gpudoc never calls.

``plumbum.path`` imports ``urllib.request`` (for ``Path.as_uri``), which pulls in http.client,
email and ssl: a third of plumbum's import; its SSH machine imports ``socket`` and its daemons
``pickle`` (~3 ms together), for code gpudoc never runs either. A stand-in takes its place in
``sys.modules`` until someone touches one of its attributes; then the real module is imported and
the stand-in takes on all of it, so nothing changes for code that uses it. (The stdlib's
``LazyLoader`` does not help here: an ``import`` statement reads the module's ``__spec__``,
which makes it load.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

DEFERRED = ("urllib.request", "socket", "pickle")  # plumbum imports them but touches none while importing


def defer_unused_imports() -> None:
    for name in DEFERRED:
        if name not in sys.modules:
            _stand_in(name)


def _stand_in(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = types.ModuleType(name)
    stand_in.__spec__ = spec
    parent_name, _, child = name.rpartition(".")

    def load(attribute: str) -> object:
        # PEP 562: called only for an attribute the stand-in does not have yet.
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        real = importlib.import_module(name)
        stand_in.__dict__.update({k: v for k, v in real.__dict__.items() if k != "__getattr__"})
        sys.modules[name] = real
        if parent_name:
            setattr(sys.modules[parent_name], child, real)
        return getattr(real, attribute)

    stand_in.__getattr__ = load  # type: ignore[method-assign]
    sys.modules[name] = stand_in
    if parent_name:
        parent = importlib.import_module(parent_name)
        setattr(parent, child, stand_in)
