"""The private plumbum hooks gpudoc overrides still exist as gpudoc uses them, so an upgrade that
changes them fails here, loudly, instead of at a user's prompt; and the metadata names the license."""

from __future__ import annotations

import inspect
import sys

import plumbum
from plumbum import cli

from gpudoc.cli.base import Command
from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_the_overridden_hooks_keep_their_signatures():
    assert list(inspect.signature(cli.Application._parse_args).parameters) == ["self", "argv"]
    assert list(inspect.signature(cli.Application._validate_args).parameters) == ["self", "swfuncs", "tailargs"]
    assert callable(getattr(cli.Application, "unbind_switches", None))
    app = Command("gpudoc-test")
    # The per-instance switch tables Command.__init__ filters, and the subcommand table the
    # completion generator walks.
    assert isinstance(app._switches_by_func, dict) and isinstance(app._switches_by_name, dict)
    assert isinstance(app._subcommands, dict)
    info = next(iter(app._switches_by_name.values()))
    for attribute in ("names", "argtype", "argname", "help", "list"):
        assert hasattr(info, attribute), attribute
    assert issubclass(cli.SwitchError, Exception)


def test_plumbum_is_pinned_below_its_next_major_and_this_one_fits():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [spec] = [d for d in project["dependencies"] if d.startswith("plumbum")]
    assert spec == "plumbum>=2.0,<3"
    assert int(plumbum.__version__.split(".")[0]) == 2


def test_the_license_is_declared_and_shipped():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
