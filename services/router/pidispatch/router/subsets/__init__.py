"""Per-forge payload projections: only the fields the filters read ever leave the raw body."""
