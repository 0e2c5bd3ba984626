"""The package version, in one place (the root facade and artifact stamps read it)."""

__version__ = "0.2.0"
