"""Section "Parts not available": every part the sections above could not build, and why
(collected through Context.missing). It must come last in SECTIONS."""

from __future__ import annotations

from harness.report.inputs import Context


def render(ctx: Context) -> list[str]:
    """The list of unavailable parts; nothing when every part was built."""
    if not ctx.unavailable:
        return []
    return ["## Parts not available", ""] + [f"- {u}" for u in ctx.unavailable] + [""]
