"""worker.forgework."""
