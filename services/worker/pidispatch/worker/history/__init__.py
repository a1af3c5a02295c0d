"""worker.history."""
