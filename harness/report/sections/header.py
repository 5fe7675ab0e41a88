"""The top of report.md: the campaign's name, when the report was generated, and which rows
come from the reference emulation rather than the libraries."""

from __future__ import annotations

import time

from harness.report.inputs import Context
from harness.vocab import Impl


def render(ctx: Context) -> list[str]:
    """Title, the generated line and the backend_impl note."""
    return [f"# epcap report: {_campaign_name(ctx)}", "",
            f"Results: `{ctx.results_dir.name}/` · generated "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} · numbers in tables are "
            "the TSV strings unchanged unless a column says derived.", "",
            *_impl_note(ctx), ""]


def _campaign_name(ctx: Context) -> str:
    """The campaign column of the first TSV row, else the directory name."""
    for t in (ctx.attempts, ctx.selection, ctx.timing):
        if t and t.rows and t.rows[0].get("campaign"):
            return t.rows[0]["campaign"]
    return ctx.results_dir.name


def _impl_note(ctx: Context) -> list[str]:
    """State which rows are the torch.distributed emulation rather than the libraries."""
    impls: dict[str, set[str]] = {}
    recorded = False
    for t in (ctx.attempts, ctx.timing):
        if t and t.has("backend_impl"):
            recorded = True
            for r in t.rows:
                if r["backend_impl"]:
                    impls.setdefault(r["backend_impl"], set()).add(r["backend"])
    if not recorded or not impls:
        return ["> **backend_impl not recorded** in these TSVs: this report cannot tell whether "
                "the rows come from the real libraries or from the reference emulation."]
    lines = []
    if Impl.REFERENCE in impls:
        names = ", ".join(sorted(impls[Impl.REFERENCE], key=str.lower))
        lines.append(f"> **Emulation, not the libraries.** Rows with `backend_impl=reference` "
                     f"({names}) were produced by the torch.distributed reference emulation "
                     "(`backends/reference`), which imitates each library's capacity-bounded "
                     "dispatch. Their capacities and timings describe the emulation, not "
                     "ECHO, UltraEP or MoonEP.")
    others = sorted(k for k in impls if k != Impl.REFERENCE)
    if others:
        lines.append("> Rows with backend_impl " + ", ".join(f"`{k}`" for k in others)
                     + " come from the named library implementation.")
    return lines
