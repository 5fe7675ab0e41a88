"""`epcap classify`: re-classify finished runs from their cell directories (docs/spec.md#command-line).

Reads each cell's logs, and its cell.json for the launcher's state and exit code and the
backend (options override them), then runs the same taxonomy the campaign runs
(`harness.taxonomy.judge.judge_run`): the class, the deciding line, the rank that failed first and the
signatures the run survived, so a user can ask why a cluster cell failed.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import BadInput
from harness.io.boundary.logs import logs_in
from harness.io.redact import redact_obj
from harness.results.layout import CELL_JSON
from harness.taxonomy.judge import (  # noqa: F401 - cell_logs/read_cell_json re-exported
    LAUNCHER_STATES,
    LOG_SUFFIXES,
    cell_logs,
    judge_run,
    read_cell_json,
)
from harness.taxonomy.signatures import layout_of, load_table, member_source


def _backend_patterns(name: str | None, runbook) -> tuple[dict | None, str | None, dict | None]:
    """(failure patterns, library, telemetry tags) of the backend, from the runbook when
    given, else the adapter of that name; none known: the upstream table alone."""
    if not name:
        return None, None, None
    from harness.api.registry import CLUSTER_KIND, load_backend
    from harness.runbook.model import BackendConfig
    if runbook is not None:
        try:
            config = runbook.backend(name)
        except StopIteration:
            raise BadInput(f"backend {name!r} is not in the runbook", field="backends") from None
    else:
        config = BackendConfig(name, CLUSTER_KIND, name)
    try:
        backend = load_backend(config)
    except BadInput:
        return None, None, None
    return backend.failure_patterns(), getattr(backend, "library", None), backend.telemetry_tags()


def classify_cell(cell_dir: Path, runbook=None, backend: str | None = None,
                  exit_code: int | None = None, state: str | None = None) -> dict:
    """The docs/spec.md#command-line `classify --json` object of one cell directory."""
    if not cell_dir.is_dir():
        raise BadInput("not a cell directory", path=str(cell_dir))
    logs_in(cell_dir, LOG_SUFFIXES)     # a special log is exit 2 naming it, as in report
    doc = read_cell_json(cell_dir)
    launcher = doc.get("launcher") if isinstance(doc.get("launcher"), dict) else {}
    cell = doc.get("cell") if isinstance(doc.get("cell"), dict) else {}
    state = state or launcher.get("state")
    if state not in LAUNCHER_STATES:
        raise BadInput(f"launcher state {state!r}: pass --state "
                       f"({'|'.join(LAUNCHER_STATES)}) or a cell.json with launcher.state",
                       path=str(cell_dir / CELL_JSON), field="launcher.state")
    if exit_code is None:
        exit_code = launcher.get("exit_code")
    if exit_code is not None and not isinstance(exit_code, int):
        raise BadInput(f"exit code {exit_code!r} is not an integer",
                       path=str(cell_dir / CELL_JSON), field="launcher.exit_code")
    patterns, library, tags = _backend_patterns(backend or cell.get("backend"), runbook)
    verdict = judge_run(exit_code, state, cell_logs(cell_dir), patterns,
                        purpose=cell.get("purpose"), library=library, tags=tags,
                        layout=layout_of(doc))
    out = verdict.outcome
    deciding = None
    if out.deciding:
        table = load_table()
        known = list(table.sources) + [r.source for r in table.records]
        src = next((s for s in known if s["id"] == out.deciding["source"]),
                   {"id": out.deciding["source"], "repo": None, "file": None, "commit": None})
        deciding = {"rank": out.deciding["rank"], "attributed_by": out.deciding["attributed_by"],
                    "source": member_source(src, out.deciding["member"]),
                    "member": out.deciding["member"],
                    "fallout": out.deciding["fallout"]}

    def line(d: dict) -> dict:
        return {"path": d["path"], "line_no": d["line_no"], "text": d["text"],
                "class": d["class"], "rank": d["rank"], "source": d["source"]}
    return {"path": str(cell_dir), "status": verdict.status,
            "line": (None if out.path is None else
                     {"path": out.path, "line_no": out.line_no, "text": out.line}),
            "deciding": deciding, "layout": layout_of(doc).rule,
            "first_failed_rank": out.first_failed_rank,
            "warnings": [line(w) for w in out.warnings],
            "warnings_total": out.warnings_total, "stated_demand": out.stated_demand,
            "rows": verdict.summary.rows if verdict.summary else 0, "state": state, "exit_code": exit_code,
            "reason": out.reason, "first_by": out.first_by,
            "quoted": [line(q) for q in out.quoted], "timeline": list(out.explain),
            "truncated": bool(out.deciding and out.deciding.get("truncated"))}


def cli_classify(cell_dirs: tuple[str, ...], runbook: str | None = None,
                 backend: str | None = None, exit_code: int | None = None,
                 state: str | None = None, as_json: bool = False,
                 explain: bool = False) -> int:
    """`epcap classify CELL_DIR...`: print each cell's class and why (or one JSON doc)."""
    rb = None
    if runbook:
        from harness.runbook.load import load_runbook
        rb = load_runbook(runbook)
    # log lines are evidence kept as written; what is printed goes through the redaction pass
    cells = [redact_obj(classify_cell(Path(d), rb, backend, exit_code, state))
             for d in cell_dirs]
    if as_json:
        print(json.dumps({"cells": cells}, indent=1))
        return 0
    for c in cells:
        print(f"{c['path']}: {c['status']}")
        if c["line"]:
            print(f"  deciding line: {c['line']['path']}:{c['line']['line_no']}: "
                  f"{c['line']['text']}")
        if c["deciding"]:
            d, src = c["deciding"], c["deciding"]["source"]
            print(f"  deciding rank: {d['rank']} ({d['attributed_by']})")
            print(f"  source: {src['id']}" + (f" {d['member']}" if d["member"] else "")
                  + (f" ({src['repo']} {src['file']} @ {src['commit']})" if src["repo"]
                     else ""))
        if c["truncated"]:
            print("  (the deciding line is cut: matched by its stable prefix)")
        if c["first_failed_rank"] is not None:
            print(f"  first failed rank: {c['first_failed_rank']} (by {c['first_by']})")
        for q in c["quoted"]:
            print(f"  quoted: {q['path']}:{q['line_no']}: {q['text']}")
        if c["stated_demand"] is not None:
            print(f"  stated receive demand: {c['stated_demand']} tokens per rank")
        for w in c["warnings"]:
            print(f"  survived ({w['class']}): {w['path']}:{w['line_no']}: {w['text']}")
        if c["warnings_total"] > len(c["warnings"]):
            print(f"  ... {c['warnings_total'] - len(c['warnings'])} more survived signatures")
        print(f"  why: {c['reason']}")
        if explain:
            print("  timeline (>> the deciding event; fallout marked):")
            for row in c["timeline"] or ["(no failure event in the logs)"]:
                print(f"    {row}")
    return 0
