"""What each command found, as typed objects: commands build them, ``gpudoc.render`` shows them.

A command's flow ends by handing its result to ``gpudoc.render.show``, which prints it as text or
as the one versioned JSON envelope (``schema_version``, ``gpudoc_version``, ``command``,
``status``, ``exit_code``, then the command's own keys from ``json_body``). Nothing here prints.

``status`` says the outcome in one word: ``ok``; ``warn`` (check: warnings only); ``fail`` (the
command's answer is negative: a failed check, an estimate that does not fit, no suggestion);
``error`` (gpudoc could not do what was asked); for ``run``, the run's own status (``ok``,
``failed``, ``interrupted``).

One module per family: ``core`` (check, estimate, any failure: all `gpudoc check` imports, since
it starts often), ``runs`` (the run history, a run's end), ``fix`` (fix and clean), ``profile``.
"""

from gpudoc.results.core import CatalogueResult, CheckResult, ErrorResult, EstimateResult, status_of

__all__ = ["CatalogueResult", "CheckResult", "ErrorResult", "EstimateResult", "status_of"]
