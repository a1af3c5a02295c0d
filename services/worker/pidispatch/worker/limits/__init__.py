"""worker.limits."""
