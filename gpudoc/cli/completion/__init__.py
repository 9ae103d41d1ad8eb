"""The generator behind ``gpudoc completions bash|zsh|fish`` and the scripts in ``completions/``.

The scripts are generated from the live plumbum application (every subcommand, every switch,
whether it takes a value), so they cannot drift from the CLI without a test noticing
(tests/shell/test_drift.py). What the CLI cannot say by itself -- that ``-p`` takes a profile
name, that ``fix`` and ``logs`` take a run id, that ``run`` takes a command line -- lives in the
small tables below. Regenerate after changing a switch:

    python -m gpudoc.cli.completion --write

At TAB time the scripts never start Python for names: profile names and run ids are shell globs
over the same directories ``gpudoc.shellcomplete`` lists (a Python start costs ~100 ms a TAB).
"""

from gpudoc.cli.completion.model import SCRIPT_NAMES, SHELLS, Node, Switch, command_tree
from gpudoc.cli.completion.scripts import main, print_completions, render, script_path, script_text, write_scripts

__all__ = ["SCRIPT_NAMES", "SHELLS", "Node", "Switch", "command_tree", "main", "print_completions", "render",
           "script_path", "script_text", "write_scripts"]
