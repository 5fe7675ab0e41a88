"""`epcap audit`: sort uploaded results into VALID, INVALID and UNKNOWN (docs/spec.md#audit-rules, docs/spec.md#command-line).

An upload is someone else's data: it is read through bounded readers (`readers`), loaded
into a pure model (`model`, `load`), and judged by rules kept as data (`rules`), which
re-derive every row they can from its cell's `cell.json` and logs.
"""

from harness.audit.catalogue import CATALOGUE
from harness.audit.cli import cli_audit
from harness.audit.engine import AuditResult, UploadVerdict, audit_target, parse_hf_target
from harness.audit.errata import load_errata
from harness.audit.vocab import REASON_CODES

__all__ = ["CATALOGUE", "REASON_CODES", "AuditResult", "UploadVerdict", "audit_target",
           "cli_audit", "load_errata", "parse_hf_target"]
