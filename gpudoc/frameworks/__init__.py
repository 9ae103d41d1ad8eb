"""The training frameworks gpudoc reads and writes, one module each behind ``base.Framework``."""
