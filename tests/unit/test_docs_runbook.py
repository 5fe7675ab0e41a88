"""docs/runbook.md's defaults table and launch modes are the code's: the table is rendered
here from a runbook that sets only the required keys, loaded by harness.runbook.load (the
defaults of load.py and of model.py's dataclasses together), and every optional key the
loader accepts has a row. Failed on the docs before (no table; the prose said 600 s and the
example 120 s, slurm.time_limit 00:10:00 against the code's 00:30:00, the launch modes
listed only in a paragraph)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from backends.reference.adapter import LAUNCH_MODES, ReferenceOptions
from harness.runbook.load import (
    DEFAULT_FRONTIER_RUNGS,
    DEPRECATED_HOURS_KEY,
    TOP_KEYS,
    load_runbook,
)
from harness.runbook.model import (
    CapacityConfig,
    ContainerConfig,
    Limits,
    PublishConfig,
    SlurmConfig,
    TimingConfig,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "runbook.md"
MINIMAL = """campaign: minimal
models: [QWEN3_30B]
shape: {seq: 128, micro_batch: 1, global_batch: 8, ep: 8}
backends: [{name: echo, kind: reference}]
"""
BEGIN, END = "<!-- defaults: tests/unit/test_docs_runbook.py -->", "<!-- /defaults -->"


def shown(value) -> str:
    """A default as the table writes it (YAML spelling)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(shown, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def defaults(tmp_path: Path) -> dict[str, str]:
    """{key: default} of every optional runbook key, from the code."""
    shutil.copy(ROOT / "runbooks" / "models.yaml", tmp_path / "models.yaml")
    (tmp_path / "r.yaml").write_text(MINIMAL)
    rb = load_runbook(tmp_path / "r.yaml")
    be = rb.backends[0]
    out = {"models_file": rb.models_path.name,
           "capacity.grid": str(rb.capacity.grid), "capacity.target": shown(rb.capacity.target)}
    for f in dataclasses.fields(CapacityConfig):
        if f.name not in ("decimals", "target"):
            out[f"capacity.{f.name}"] = shown(getattr(rb.capacity, f.name))
    out["measure.warmup"], out["measure.iters"] = shown(rb.measure.warmup), shown(rb.measure.iters)
    assert rb.validate.seed == rb.seed + 1 and rb.validate.iters == rb.measure.iters
    out["validate.seed"], out["validate.iters"] = "seed + 1", "measure.iters"
    assert rb.frontier_rungs == 0                        # no `frontier:`: no frontier runs
    out["frontier"] = "null (no frontier)"
    out["frontier.rungs"] = shown(DEFAULT_FRONTIER_RUNGS) + " (when frontier: is given)"
    assert rb.ladder_sigmas == () and rb.ladder_models == () and rb.ladder_backends == ()
    out["ladder"] = "null (no ladder)"
    out["ladder.models"] = "every model"
    out["ladder.backends"] = "every backend"
    for f in dataclasses.fields(TimingConfig):
        out[f"timing.{f.name}"] = shown(getattr(rb.timing, f.name))
    assert rb.baseline == be.name                        # null = the first timed backend
    for prefix, cls, value in (("limits", Limits, rb.limits), ("slurm", SlurmConfig, rb.slurm),
                               ("container", ContainerConfig, rb.container),
                               ("publish", PublishConfig, rb.publish)):
        for f in dataclasses.fields(cls):
            inner = getattr(value, f.name)
            if dataclasses.is_dataclass(inner):         # limits.unclassified: {retries, then}
                for g in dataclasses.fields(inner):
                    out[f"{prefix}.{f.name}.{g.name}"] = shown(getattr(inner, g.name))
            else:
                out[f"{prefix}.{f.name}"] = shown(inner)
    out.update({"launcher": rb.launcher, "device_memory_gb": "null (unlimited)",
                "seed": shown(rb.seed), "repositories": shown(rb.repositories),
                "paths": shown(rb.paths), "cell_wall_hours": shown(rb.cell_wall_hours),
                "max_parallel_cells": shown(rb.max_parallel_cells), "routing": "null"})
    assert rb.device_memory_bytes is None and rb.models[0].routing is None
    assert be.module == be.name
    out["backends[i].module"] = "the name"
    for name in ("select", "time", "flags"):
        out[f"backends[i].{name}"] = shown(getattr(be, name))
    out["backends[i].options"] = "{}"
    opts = ReferenceOptions()
    out["reference options.launch"] = f"{opts.launch} (one of: {', '.join(LAUNCH_MODES)})"
    for f in dataclasses.fields(ReferenceOptions):
        if f.name != "launch":
            out[f"reference options.{f.name}"] = shown(getattr(opts, f.name))
    return out


def render(table: dict[str, str]) -> str:
    """The table docs/runbook.md holds between BEGIN and END."""
    rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in table.items())
    return f"{BEGIN}\n| key | default |\n| --- | --- |\n{rows}\n{END}"


def documented(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end + len(END)] if 0 <= start < end else ""


def test_the_defaults_table_is_the_codes(tmp_path):
    want = render(defaults(tmp_path))
    assert documented(DOC.read_text(encoding="utf-8")) == want, (
        "docs/runbook.md's defaults table differs from the code; the table as the code "
        f"has it:\n\n{want}")


def test_every_optional_top_level_key_has_a_row_or_a_section(tmp_path):
    keys = {k.split(".")[0].split("[")[0] for k in defaults(tmp_path)}
    required = {"campaign", "models", "shape", "backends"}
    assert set(TOP_KEYS) - required - keys == {DEPRECATED_HOURS_KEY}     # said in the prose


def test_the_launch_modes_in_the_prose_are_the_codes():
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    said = re.search(r"launch \(([^)]*)\)", text)
    assert said, "docs/runbook.md names no launch modes"
    modes = re.findall(r"(?:^|\| )([a-z-]+)", said.group(1))
    assert tuple(modes) == LAUNCH_MODES, (modes, LAUNCH_MODES)


@pytest.mark.parametrize("change", [("`600`", "`120`"), ("`00:30:00`", "`00:10:00`"),
                                    ("forked)`", "forked, pinned)`")])
def test_the_table_check_fails_on_a_wrong_default(tmp_path, change):
    table = documented(DOC.read_text(encoding="utf-8"))
    assert change[0] in table
    text = table.replace(*change, 1)
    assert text != render(defaults(tmp_path))
