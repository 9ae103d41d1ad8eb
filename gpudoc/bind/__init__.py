"""Bindings: how a profile's knobs reach the training job.

Three ways in, combinable (SPEC "[bind]"):
- environment: ``GPUDOC_<KNOB>`` for every ``[train]`` knob (``bind.env``, default on);
  booleans ``true``/``false``, integers in decimal; ``{knob}`` placeholders in COMMAND;
- arguments: ``bind.args`` names a preset that replaces or appends the framework's own flags in
  the training script's arguments (never the launcher's);
- files: ``[bind.files."path"]`` edits JSON/YAML/TOML/Python configs and flags in shell scripts,
  by explicit key paths (one or several per knob, with an optional value map; ``targets``) or a
  file preset; only the bound values change, and an explicit value must fit the one it replaces.

``plan_bindings`` plans and checks (reads files, writes nothing: ``run --dry-run`` shows the diffs
and every binding; a contradiction the job would trip over refuses it, ``conflicts``);
``apply_file_edits`` writes the plan atomically, with a backup beside each file.
"""

from gpudoc.bind.apply import apply_file_edits
from gpudoc.bind.plan import BindPlan, FileEdit, plan_bindings, unified_diff

__all__ = ["BindPlan", "FileEdit", "apply_file_edits", "plan_bindings", "unified_diff"]
