"""pi-dispatch router service."""
