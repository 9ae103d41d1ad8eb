"""gpudoc: pre-flight doctor, launcher and OOM fixer for PyTorch training."""

__version__ = "0.1.0"
