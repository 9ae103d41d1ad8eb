"""Launching a job: the pure command builder, the spawner (pty or pipes, tee, signals, subreaper)
and the GPU sampler. ``gpudoc.commands.run`` wires them to profiles, checks and run records."""
