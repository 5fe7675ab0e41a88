"""`epcap audit` outputs: a table on the terminal, `--out` TSV, `--json`; the exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.audit.engine import NOT_PROVEN, AuditResult, UploadVerdict, audit_target
from harness.audit.errata import parse_git_repos
from harness.io.boundary.text import shown, shown_obj
from harness.io.boundary.values import bounded_int
from harness.io.outdir import OutDir
from harness.results.tables import write_table_atomic
from harness.vocab import DEFAULT_PAD_MULTIPLE

AUDIT_COLUMNS = ("path", "verdict", "reasons", "ignored_cells", "why", "notes", "sample_seed")


def tsv_rows(result: AuditResult) -> list[dict]:
    """One TSV row per upload (lists joined with ',' and '; ')."""
    return [{k: shown(v) for k, v in {
        "path": u.path, "verdict": u.verdict, "reasons": ",".join(u.reasons),
        "ignored_cells": ",".join(u.ignored_cells), "why": "; ".join(u.why),
        "notes": "; ".join(u.notes),
        "sample_seed": "" if u.sample_seed is None else str(u.sample_seed)}.items()}
            for u in result.uploads]


def print_table(result: AuditResult) -> None:
    """A rich table on the terminal, then the summary line; every string from the upload
    passes `shown` (escape sequences and controls written escaped) and rich's markup escape."""
    from rich.console import Console  # lazy: only the terminal table needs rich
    from rich.markup import escape  # lazy: as above
    from rich.table import Table as RichTable  # lazy: as above

    colour = {"VALID": "green", "INVALID": "red", "UNKNOWN": "yellow"}
    table = RichTable(title=f"epcap audit {escape(shown(result.target))}")
    for name in ("upload", "verdict", "reasons", "ignored"):
        table.add_column(name, no_wrap=True)
    table.add_column("why / notes", overflow="fold")
    for u in result.uploads:
        lines = [shown(w) for w in u.why] + [f"note: {shown(n)}" for n in u.notes]
        table.add_row(escape(shown(u.path)), f"[{colour[u.verdict]}]{u.verdict}[/]",
                      escape("\n".join(shown(r) for r in u.reasons)),
                      str(len(u.ignored_cells)) if u.ignored_cells else "",
                      escape("\n".join(lines)))
    console = Console()
    if not console.is_terminal:          # piped: do not squeeze into 80 columns
        console = Console(width=200)
    console.print(table)
    for u in result.uploads:
        console.print(escape(shown(grounds(u), newlines=True)), highlight=False)
    seed = (f"; sample seed {result.sample_seed}: --sample-seed {result.sample_seed} "
            f"reproduces the sampled verdicts" if any(u.sample_seed is not None
                                                        for u in result.uploads) else "")
    console.print(" ".join(f"{k}={v}" for k, v in result.summary.items())
                  + f"  (audited in {result.elapsed_s:.2f} s, cell logs included{seed})",
                  highlight=False)


def grounds(u: UploadVerdict) -> str:
    """What one upload's verdict rests on, in words: the rules that ran, those that did not
    apply and why, what could not be checked, the emulation note, what VALID does not prove."""
    lines = [f"{u.path}: {u.verdict}",
             f"  rules that ran and found nothing ({len(u.rules_ran)}): "
             f"{', '.join(u.rules_ran) or 'none'}"]
    if u.rules_not_applicable:
        lines.append(f"  did not apply ({len(u.rules_not_applicable)}): "
                     + "; ".join(u.rules_not_applicable))
    if u.not_checked:
        lines.append(f"  could not be checked ({len(u.not_checked)}): " + "; ".join(u.not_checked))
    if u.measured_pairs is not None:
        lines.append(f"  pairs measured (a selected capacity): {u.measured_pairs} of "
                     f"{u.selection_pairs}")
    if u.sample_seed is not None:
        lines.append(f"  sampled: sample seed {u.sample_seed} (`epcap audit --sample-seed "
                     f"{u.sample_seed}` reproduces this verdict; the notes say what fraction "
                     f"was checked)")
    if u.emulation:
        lines.append(f"  emulation: {u.emulation}")
    if u.verdict == "VALID":
        lines.append(f"  what VALID does not prove: {NOT_PROVEN}")
    return "\n".join(lines)


def cli_audit(target: str, errata: str | None = None, git_repos: tuple[str, ...] = (),
              out: str | None = None, as_json: bool = False, strict: bool = False,
              pad_multiple: int = DEFAULT_PAD_MULTIPLE, sample_seed: int | None = None,
              trusted_key: str | None = None) -> int:
    """`epcap audit`: 0, or 1 under --strict when anything is INVALID or UNKNOWN."""
    bounded_int(pad_multiple, "--pad-multiple", "pad_multiple")   # 10**23: refused, not looped on
    result = audit_target(target, Path(errata) if errata else None, parse_git_repos(git_repos),
                          pad_multiple=pad_multiple, sample_seed=sample_seed,
                          trusted_key=Path(trusted_key) if trusted_key else None)
    if out:
        out_path = Path(out)            # written through its folder's fd; neither is a link
        with OutDir.open(out_path.parent, "--out", create=False) as folder:
            write_table_atomic(folder / out_path.name, AUDIT_COLUMNS, tsv_rows(result))
    if as_json:
        sys.stdout.write(json.dumps(shown_obj(result.to_dict()), indent=2) + "\n")
    else:
        print_table(result)
    bad = result.summary["INVALID"] + result.summary["UNKNOWN"]
    return 1 if strict and bad else 0
