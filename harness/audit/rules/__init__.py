"""The audit rules, one module per family; the rule table is data."""
