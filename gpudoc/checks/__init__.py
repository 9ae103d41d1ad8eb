"""The pre-flight checks: pure functions over one facts snapshot (see ``catalogue``)."""

from gpudoc.checks.catalogue import CATALOGUE, GROUPS, IDS, Check, run_checks, select

__all__ = ["CATALOGUE", "GROUPS", "IDS", "Check", "run_checks", "select"]
