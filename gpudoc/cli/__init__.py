"""The command line: thin plumbum applications that parse switches and call ``gpudoc.commands``.

Modules here are imported for ``gpudoc --help``: they import nothing heavy at module level.
"""
