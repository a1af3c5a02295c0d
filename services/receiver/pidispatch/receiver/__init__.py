"""pi-dispatch receiver service."""
