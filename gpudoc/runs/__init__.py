"""Run records: ``.gpudoc/runs/<id>/{run.json,output.log,gpu.csv}``."""

# RunRecord too (``gpudoc.runs.store.RunRecord``), imported only when a command reads a record.
from gpudoc.runs.store import RunStore  # noqa: F401
