"""Shared foundations of pi-dispatch: settings, Redis names, models, streams, logging."""

__version__ = "0.1.0"
