"""pi-dispatch worker service."""
