"""The report's sections rendered beside the figures in a forked child (harness.report.build.
Beside) give exactly what rendering them in the process gives: the lines, and the parts and
figures recorded on the context, in section order; a child that dies is rendered again here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.report import build
from harness.report.build import Beside


@dataclass
class FakeContext:
    """The two lists a section may append to, as on harness.report.inputs.Context."""

    unavailable: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def missing(self, part: str, why: str) -> str:
        self.unavailable.append(f"{part}: {why}")
        return f"not available: {why}"


def section_of(lines: list[str], missing: list[str], figures: list[str]):
    """A section that renders `lines`, records `missing` parts and draws `figures`."""
    def render(ctx) -> list[str]:
        out = [ctx.missing(m, "why") for m in missing]
        ctx.figures.extend(figures)
        return [*lines, *out]
    return render


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=25, deadline=None)
@given(lines=st.lists(TEXT, max_size=30), missing=st.lists(TEXT, max_size=4),
       figures=st.lists(TEXT, max_size=4), before=st.lists(TEXT, max_size=3))
def test_the_child_gives_what_rendering_here_gives(lines, missing, figures, before):
    render = section_of(lines, missing, figures)
    here = FakeContext(list(before), list(before))
    expected = render(here)
    ctx = FakeContext(list(before), list(before))
    got = Beside(ctx, render).lines()
    assert got == expected
    assert (ctx.unavailable, ctx.figures) == (here.unavailable, here.figures)


def test_the_child_really_renders_in_another_process():
    parent = os.getpid()
    seen = Beside(FakeContext(), lambda ctx: [str(os.getpid())]).lines()
    assert seen != [str(parent)]


def test_a_child_that_dies_is_rendered_again_here():
    parent = os.getpid()

    def render(ctx) -> list[str]:
        if os.getpid() != parent:
            os._exit(9)
        ctx.figures.append("drawn here")
        return ["here"]

    ctx = FakeContext()
    assert Beside(ctx, render).lines() == ["here"]
    assert ctx.figures == ["drawn here"]


def test_a_cancelled_child_is_reaped(tmp_path: Path):
    marker = tmp_path / "done"

    def slow(ctx) -> list[str]:
        import time
        time.sleep(30)
        marker.write_text("x")
        return []

    child = Beside(FakeContext(), slow)
    pid = child.pid
    child.cancel()
    assert child.pid is None
    try:                                   # reaped: no such child of ours any more
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError("the child was not reaped")
    except ChildProcessError:
        pass
    assert not marker.exists()


def test_the_audit_the_forecast_and_the_risk_figures_are_rendered_beside():
    from harness.report.sections import audit, forecast, risk
    assert build.BESIDE == (audit, forecast, risk)
    assert set(build.DRAWS) <= set(build.BESIDE)
    assert all(section in build.SECTIONS for section in build.BESIDE)


def test_a_child_killed_while_sending_is_rendered_again_here():
    import signal
    import time
    parent = os.getpid()
    big = [f"{i:06d}" + "x" * 1000 for i in range(2000)]   # 2 MB: blocks on the full pipe

    def render(ctx) -> list[str]:
        return big if os.getpid() != parent else ["here"]

    child = Beside(FakeContext(), render)
    time.sleep(0.5)                            # it has rendered and is blocked writing
    os.kill(child.pid, signal.SIGKILL)
    assert child.lines() == ["here"]           # a truncated answer is never unpickled
