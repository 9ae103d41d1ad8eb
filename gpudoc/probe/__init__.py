"""The probe: code that runs inside the job's own Python (``site/sitecustomize.py`` loads
``agent.py`` by path). gpudoc never imports it; ``gpudoc.runs.probe`` reads what it writes."""
