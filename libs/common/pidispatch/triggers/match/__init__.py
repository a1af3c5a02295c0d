"""Pure per-forge filters: a projected subset and the rules in, a decision out (no I/O)."""
