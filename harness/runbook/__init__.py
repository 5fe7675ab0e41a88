"""The runbook: its typed model, its loader and its checks."""
