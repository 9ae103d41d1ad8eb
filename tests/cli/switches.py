"""The switches a plumbum command class declares, to hold them against a command's switch table."""

from __future__ import annotations


def declared_switches(command: type) -> set[str]:
    declared = set()
    for attr in dir(command):
        switch = getattr(getattr(command, attr, None), "_switch_info", None)
        if switch is not None and switch.group == "Switches":
            declared.update(("-" if len(n) == 1 else "--") + n for n in switch.names)
    return declared
