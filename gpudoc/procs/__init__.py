"""Processes that hold GPU memory: who they are (classify) and how to end this user's (clean)."""
