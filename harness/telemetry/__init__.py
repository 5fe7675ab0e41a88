"""Dispatch telemetry: log lines to rows, summaries and per-step peaks."""
