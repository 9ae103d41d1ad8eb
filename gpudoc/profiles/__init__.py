"""Profiles: TOML files holding a job's GPU needs, environment and training knobs."""

from gpudoc.profiles.loader import load_profile, resolve_profile_path, shipped_profiles_dir  # noqa: F401
from gpudoc.profiles.model import KNOWN_KNOBS, Profile, UserRung  # noqa: F401
