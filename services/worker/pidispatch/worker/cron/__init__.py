"""worker.cron."""
