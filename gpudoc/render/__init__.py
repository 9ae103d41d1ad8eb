"""Rendering: findings and documents as text for people or JSON for programs. Formats only."""
