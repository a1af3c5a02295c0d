"""worker.engine."""
