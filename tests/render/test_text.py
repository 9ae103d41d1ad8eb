"""Every result type has its text renderer, and the renderers of the other commands' results are
imported only when one of their results is shown (`gpudoc check` starts without them)."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

from gpudoc.render.text import _RENDERERS, text
from tests.conftest import REPO

RESULT_MODULES = ("gpudoc.results.core", *_RENDERERS)


def _result_types(module_name: str) -> list[type]:
    module = importlib.import_module(module_name)
    return [obj for obj in vars(module).values()
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module_name]


def test_every_result_type_has_a_renderer_where_the_table_says():
    assert {m.rsplit(".", 1)[1] for m in RESULT_MODULES} == {"core", "runs", "fix", "profile", "restore", "tune"}
    fallback = text.dispatch(object)
    for module_name in RESULT_MODULES:
        if module_name in _RENDERERS:
            importlib.import_module(_RENDERERS[module_name])
        types = _result_types(module_name)
        assert types, module_name
        for cls in types:
            if cls.__name__ not in ("NodeView", "Trial", "Search"):  # parts of FixResult, TuneResult: never shown alone
                assert text.dispatch(cls) is not fallback, cls


def test_a_result_brings_its_renderers_and_only_those():
    code = (
        "import io, sys\n"
        "from gpudoc.output import Console\n"
        "from gpudoc.render.text import text\n"
        "from gpudoc.results.profile import ProfileNewResult\n"
        "before = {m for m in sys.modules if m.startswith('gpudoc.render.')}\n"
        "console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)\n"
        "text(ProfileNewResult(path='p/x.toml', name='x'), console)\n"
        "after = {m for m in sys.modules if m.startswith('gpudoc.render.')}\n"
        "print(sorted(before), sorted(after - before), bool(console.out.getvalue()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['gpudoc.render.text'] ['gpudoc.render.profile_text'] True"


def test_check_without_gpu_facts_says_so_in_its_header():
    import io

    from gpudoc.facts.model import Facts
    from gpudoc.output import Console
    from gpudoc.results.core import CheckResult

    headers = []
    for source in ("none", "nvml"):
        console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
        text(CheckResult(facts=Facts(collected_at="2026-01-01T00:00:00Z", source=source), findings=(), exit_code=0),
             console)
        headers.append(console.out.getvalue().splitlines()[0])
    assert headers == ["gpudoc check: no GPU facts (NVML did not start)", "gpudoc check: facts from nvml"]
