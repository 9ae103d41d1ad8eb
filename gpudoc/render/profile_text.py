"""`gpudoc profile list|show|new` as text."""

from __future__ import annotations

import json

from gpudoc.output import Console, printable
from gpudoc.render.text import text
from gpudoc.results.profile import ProfileListResult, ProfileNewResult, ProfileShowResult


@text.register
def _profile_list(result: ProfileListResult, console: Console) -> None:
    width = max((len(row["name"]) for row in result.profiles), default=4)
    for row in result.profiles:
        console.print(f"{row['name']:<{width}}  {row['origin']:<7}  {row['description']}")


@text.register
def _profile_show(result: ProfileShowResult, console: Console) -> None:
    data = result.profile
    console.print(f"{console.style(str(data['name']), 'bold')}  {data.get('description') or ''}")
    console.print(f"  file:   {data.get('path')}" + (" (shipped: edits go to ./gpudoc.toml)" if result.shipped else ""))
    chain = data.get("extends_chain") or []
    if len(chain) > 1:
        console.print("  extends: " + " -> ".join(_stem(p) for p in chain[1:]))
    for table in ("gpu", "env", "train", "launch", "model", "bind", "run"):
        values = data.get("knobs" if table == "train" else table)
        if not values:
            continue
        console.print(f"  [{table}]")
        for key, value in values.items():
            console.print(f"    {key} = {json.dumps(value, default=str)}")
    if data.get("global_batch_size"):
        console.print(f"  global batch = {data['global_batch_size']} (micro x accumulation x world size "
                      f"{data.get('world_size')})")


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[:-5] if name.endswith(".toml") else name


@text.register
def _profile_new(result: ProfileNewResult, console: Console) -> None:
    console.print(f"wrote {result.path}")
    if result.kept is not None:
        console.print(f"the profile it replaced is kept in {printable(result.kept)}")
    console.print(f"next: edit [train] and [model], then `gpudoc check -p {result.name}`")
