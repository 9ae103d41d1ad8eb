"""The facts snapshot: process lookup by PID (a dictionary, never stale after a replace)."""

from __future__ import annotations

from dataclasses import replace

from gpudoc.facts.model import Facts, ProcessInfo


def test_process_lookup_by_pid_keeps_the_first_entry_and_follows_replace():
    first = ProcessInfo(pid=7, visible=True, name="first")
    facts = Facts(collected_at="now", source="test",
                  processes=(first, ProcessInfo(pid=7, visible=True, name="second"),
                             *(ProcessInfo(pid=1000 + i, visible=False) for i in range(3000))))
    assert facts.process(7) is first
    assert facts.process(3999).pid == 3999 and facts.process(5) is None
    changed = replace(facts, processes=(ProcessInfo(pid=7, visible=True, name="new"),))
    assert changed.process(7).name == "new" and changed.process(1000) is None
    assert "_processes_by_pid" not in Facts.from_dict(facts.to_dict()).to_dict()
