"""The dataset card `epcap publish` writes as the repository's README.md: the Hub's YAML
metadata (one `configs:` entry per TSV so the dataset viewer shows each as a table, license,
tags) and a body that says what was measured, on what hardware, which rows are reference
emulation, the audit's verdict rule by rule, and how to audit it again.

Upstream formats this depends on:
- huggingface_hub 2.4.0 (the installed package), src/huggingface_hub/repocard_data.py
  `DatasetCardData` (license, tags, pretty_name; other keys such as `configs` kept as given)
  and src/huggingface_hub/repocard.py `DatasetCard` (README.md with `---` YAML front matter).
- The Hub's manual configuration of a dataset: `configs:` entries with `config_name`,
  `data_files` (`split`, `path`) and builder options such as `sep: "\\t"`, as in
  huggingface.co/datasets/datasets-examples/doc-formats-tsv-2 README.md at commit
  54ba5b69cabf0139f7edad79a0ca2ece50921fd8 and datasets-examples/doc-yaml-5 README.md at
  commit 6f646292fd0446740eb2cabf3515b1eb1a2a16bf.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from harness.audit import AuditResult
from harness.audit.model import FAIL, NOT_APPLICABLE, PASS, UNKNOWN
from harness.audit.readers import read_fields
from harness.results.layout import ATTEMPTS_TSV, PROVENANCE_TXT, SELECTION_TSV, TIMING_TSV
from harness.results.tables import read_rows
from harness.vocab import Impl

CARD_PATH = "README.md"                 # the Hub reads a repository's card from its root
LICENSE = "cc-by-4.0"
TAGS = ("epcap", "mixture-of-experts", "expert-parallelism", "benchmark")
STATE_WORDS = {PASS: "ran, found nothing", FAIL: "FAILED", UNKNOWN: "could not decide",
               NOT_APPLICABLE: "not applicable"}


def config_name(rel: str, used: set[str]) -> str:
    """A config name from a TSV's path (`report/demand.tsv` -> `demand`), unique in `used`."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", PurePosixPath(rel).stem) or "table"
    name, n = base, 2
    while name in used:
        name, n = f"{base}_{n}", n + 1
    used.add(name)
    return name


def configs(prefix: str, files: list[str]) -> list[dict]:
    """One `configs:` entry per uploaded TSV: its path in the repository, tab-separated."""
    used: set[str] = set()
    return [{"config_name": config_name(rel, used),
             "data_files": [{"split": "train", "path": prefix + rel}], "sep": "\t"}
            for rel in sorted(f for f in files if f.endswith(".tsv"))]


def _rows(root: Path, name: str) -> list[dict[str, str]]:
    try:
        return read_rows(root / name)
    except (OSError, UnicodeDecodeError, ValueError):
        return []


def _provenance(root: Path) -> dict[str, str]:
    """The campaign's provenance.txt through the audit's bounded reader ({} if unreadable)."""
    fields, _problem = read_fields(root, root / PROVENANCE_TXT)
    return fields or {}


def measured_lines(root: Path) -> list[str]:
    """What was measured: models, backends, cells; on what hardware; reference rows."""
    attempts, selection = _rows(root, ATTEMPTS_TSV), _rows(root, SELECTION_TSV)
    timing = _rows(root, TIMING_TSV)
    models = sorted({r.get("model", "") for r in attempts + selection} - {""})
    backends = sorted({r.get("backend", "") for r in attempts + selection + timing} - {""})
    prov = _provenance(root)
    gpu = prov.get("gpu.model", "UNKNOWN (no provenance.txt)")
    lines = [f"- models: {', '.join(models) or 'none'}",
             f"- backends: {', '.join(backends) or 'none'}",
             f"- rows: {len(attempts)} in {ATTEMPTS_TSV}, {len(selection)} in {SELECTION_TSV}, "
             f"{len(timing)} in {TIMING_TSV}",
             f"- hardware (the campaign's {PROVENANCE_TXT}): gpu.model {gpu}, gpu.count "
             f"{prov.get('gpu.count', 'UNKNOWN')}; torch {prov.get('torch', 'UNKNOWN')}"]
    for name, rows in ((ATTEMPTS_TSV, attempts), (TIMING_TSV, timing)):
        impls = [r.get("backend_impl", "") for r in rows]
        ref = sum(i == Impl.REFERENCE for i in impls)
        if ref:
            lines.append(f"- {ref} of {len(rows)} rows of {name} are `{Impl.REFERENCE}` "
                         f"emulation (backend_impl): the numpy/torch model of a library on "
                         f"this machine, not a GPU measurement of the library")
    return lines


def card_text(root: Path, result: AuditResult, repo: str, prefix: str, files: list[str],
              withheld: dict[str, str], license_id: str = LICENSE) -> str:
    """README.md for the repository: front matter from huggingface_hub's DatasetCardData."""
    from huggingface_hub import DatasetCardData  # lazy: only publishing needs the hub

    upload = result.uploads[0]
    ref = any("`reference` emulation" in line for line in measured_lines(root))
    data = DatasetCardData(license=license_id, pretty_name=f"epcap {prefix.rstrip('/')}",
                           tags=[*TAGS, *(["reference-emulation"] if ref else [])],
                           configs=configs(prefix, files))
    body = [f"# epcap campaign `{prefix.rstrip('/')}`", "",
            "Expert-parallel dispatch capacity measured by epcap: the capacity each "
            "(model, backend) pair needs without dropped tokens, validated on held-out "
            "routing, and dispatch/combine timing.", "",
            f"Files are under `{prefix}`; the report is `{prefix}report/report.md`. Each TSV "
            "is a config of this card, shown by the dataset viewer.", "",
            "## What was measured", "", *measured_lines(root), "",
            f"## Audit: {upload.verdict}", "",
            "`epcap audit` of these files before they were uploaded, rule by rule:", ""]
    body += [f"- `{c.code}`: {STATE_WORDS.get(c.state, c.state)}" for c in upload.checks]
    if withheld:
        body += ["", "Routing traces too large to publish (only their sha256, in "
                 "`<trace>.sha256`): `routing-not-from-seed` cannot compare them in an "
                 "hf:// audit and says so (UNKNOWN):", ""]
        body += [f"- `{prefix}{rel}` sha256 {digest}" for rel, digest in sorted(withheld.items())]
    body += ["", "## Reproduce", "",
             "Audit exactly this upload at the commit that carries this card:", "",
             f"    epcap audit hf://datasets/{repo}@<revision>", "",
             "where `<revision>` is that commit (the repository's history lists it). "
             "Earlier uploads stay at their own paths; this card describes the latest.", ""]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body)
