"""Byte-exact edits of config files: JSON, YAML, TOML and Python, and their line endings.

Each editor changes only the characters of the values it is asked to set and leaves every other
byte as written (comments, order, number spelling, CRLF), because users review these files as
diffs. The room knows no framework: which key a knob lives under is the frameworks' adapters' and
the binding planner's business (``gpudoc.frameworks``, ``gpudoc.bind``); here a key is a path.
"""
