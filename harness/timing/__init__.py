"""Pure timing statistics and verdicts."""
