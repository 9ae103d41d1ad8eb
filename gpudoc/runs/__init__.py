"""Run records: ``.gpudoc/runs/<id>/{run.json,output.log,gpu.csv}``."""

from gpudoc.runs.store import RunRecord, RunStore  # noqa: F401
