"""Names for shell completion, with nothing heavier than ``os`` imported.

The completion scripts in ``completions/`` list profile names and run ids themselves (shell globs
cost nothing; a Python start costs ~100 ms per TAB). They ask Python only for the one thing a
shell cannot see: where an installed gpudoc keeps its shipped profiles, and only when the install
layout is not one they recognise (see ``_gpudoc_shipped_dir`` in the scripts). This module is
that fallback and the reference the shell tests compare against:

    python -m gpudoc.shellcomplete profiles|runs|shipped-dir

The lookup mirrors ``gpudoc.profiles.loader.search_dirs`` and ``gpudoc.runs.store.RunStore``
without importing them (they pull in tomllib and the profile schema); a test keeps them in step.
The upward search itself is theirs, ``gpudoc.upward`` (it imports nothing but ``os``).
"""

from __future__ import annotations

import os
import sys

_RECORD = "run.json"  # gpudoc.runs.store.RECORD


def shipped_profiles_dir() -> str:
    """Same rule as ``loader.shipped_profiles_dir``: beside the package, else under share/."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")
    if os.path.isdir(here):
        return here
    return os.path.join(sys.prefix, "share", "gpudoc", "profiles")


def profile_dirs(cwd: str | None = None) -> list[str]:
    from gpudoc.upward import project_folders

    cwd = cwd or os.getcwd()
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    project = next((os.path.join(folder, ".gpudoc", "profiles") for folder in project_folders(cwd)
                    if os.path.isdir(os.path.join(folder, ".gpudoc", "profiles"))), None)
    return [
        project or os.path.join(cwd, ".gpudoc", "profiles"),
        os.path.join(xdg, "gpudoc", "profiles"),
        shipped_profiles_dir(),
    ]


def profile_names(cwd: str | None = None) -> list[str]:
    """Every profile name visible from ``cwd``, each once, sorted."""
    names: set[str] = set()
    for directory in profile_dirs(cwd):
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".toml") and os.path.isfile(os.path.join(directory, entry)):
                names.add(entry[: -len(".toml")])
    return sorted(names)


def runs_dir(cwd: str | None = None) -> str:
    """``RunStore.locate``'s rule: $GPUDOC_HOME, else the nearest .gpudoc/runs up to the project's
    root (a directory with .git) and below $HOME, else ./.gpudoc."""
    home = os.environ.get("GPUDOC_HOME")
    if home:
        return os.path.join(home, "runs")
    from gpudoc.upward import project_folders

    here = os.path.abspath(cwd or os.getcwd())
    for folder in project_folders(here):
        if os.path.isdir(os.path.join(folder, ".gpudoc", "runs")):
            return os.path.join(folder, ".gpudoc", "runs")
    return os.path.join(here, ".gpudoc", "runs")


def run_ids(cwd: str | None = None) -> list[str]:
    """Run directories that hold a record, oldest first (ids sort by start time)."""
    root = runs_dir(cwd)
    try:
        entries = os.listdir(root)
    except OSError:
        return []
    return sorted(e for e in entries if os.path.isfile(os.path.join(root, e, _RECORD)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    what = argv[0] if argv else ""
    if what == "profiles":
        lines = profile_names()
    elif what == "runs":
        lines = run_ids()
    elif what == "shipped-dir":
        lines = [shipped_profiles_dir()]
    else:
        sys.stderr.write("usage: python -m gpudoc.shellcomplete profiles|runs|shipped-dir\n")
        return 2
    for line in lines:
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
