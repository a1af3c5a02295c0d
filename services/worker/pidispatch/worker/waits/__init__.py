"""worker.waits."""
