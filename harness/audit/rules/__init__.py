"""The audit rules, as data (the MLPerf way), one module per family named by what it checks;
each module holds its checks and its `RULES` rows side by side. harness/audit/catalogue.py
joins them into the one ordered catalogue the engine applies (rules/README.md)."""

from harness.audit.rules.apply import apply_row, apply_rule, expand, fold

__all__ = ["apply_row", "apply_rule", "expand", "fold"]
