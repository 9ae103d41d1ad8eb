"""Log text -> ``Diagnosis``: what killed the job, on which rank and GPU, and the memory figures.

``gpudoc.diagnose.diagnosis`` holds the typed result, ``gpudoc.diagnose.text`` the parser.
"""
