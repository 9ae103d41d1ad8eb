"""`gpudoc restore` as text: one line per file, with the edits it undoes (or would undo)."""

from __future__ import annotations

from typing import Any

from gpudoc.output import Console, printable
from gpudoc.render.text import text
from gpudoc.results.restore import RestoreResult


@text.register
def _restore(result: RestoreResult, console: Console) -> None:
    style = console.style
    if not result.files:
        console.print(f"Nothing to restore: gpudoc edited no file in run {result.run_id}'s chain.")
        return
    head = "Would restore" if result.dry_run else "Restored"
    changed = [f for f in result.files if f["action"] != "unchanged"]
    if not changed:
        console.print(f"Nothing to restore: the {len(result.files)} file(s) gpudoc edited in the chain of run "
                      f"{result.run_id} are as they were before its first edit.")
        return
    console.print(f"{head} {len(changed)} of {len(result.files)} file(s) edited in the chain of run "
                  f"{result.run_id} ({len(result.chain)} run(s)):")
    for doc in result.files:
        path = printable(str(doc["path"]))
        if doc["action"] == "unchanged":
            console.print(f"  {path}: already as before gpudoc's first edit")
            continue
        if doc["action"] == "remove":
            verb = ("would be " if result.dry_run else "") + "removed (gpudoc created it)"
        else:
            verb = ("would go" if result.dry_run else "back") + " to its state before gpudoc's first edit"
        hand = ""
        if doc["hand_edited"]:
            kept = f": that change is kept in {printable(doc['kept'])}" if doc.get("kept") else ""
            hand = style(f" (changed by hand since; --force{kept})", "yellow")
        console.print(f"  {path}: {verb}{hand}")
        for edit in doc["edits"]:
            console.print(style(f"    undoes run {edit['run_id']}: {_changes(edit['changes'])}", "dim"))
    for backup in result.removed_backups:
        console.print(style(f"  {printable(backup)}: removed (it held what the file holds again)", "dim"))


def _changes(changes: list[dict[str, Any]]) -> str:
    if not changes:
        return "an edit"
    return ", ".join(f"{c.get('key')} {c.get('old')} -> {c.get('new')}" for c in changes)
