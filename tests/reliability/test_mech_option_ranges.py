"""Every number of a backend's options has a declared range (harness/io/bounds.py RANGES),
checked at load: the nested planner, memory and routing options too, so a bad one is exit 2
naming `backends[i].options.planner.num_buckets` at its line, before any directory exists.

Seen failing on 28ad19d: `planner: {echo_algorithm: approx_bin_packing, num_buckets:
1000000000000000}` loaded and passed --dry-run; a real run built 10^15 deques per rank
(planner_echo.py approx_bin_packing), and under a memory limit the MemoryError was
classified does_not_fit and the campaign ended "done", rc 0. Every out-of-range value the
generator drew here loaded."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backends.megatron.baseline import BaselineOptions
from backends.megatron.echo import EchoOptions
from backends.megatron.ultraep import UltraEPOptions
from backends.megatron_core.adapter import MegatronCoreOptions
from backends.reference.adapter import NESTED_SECTIONS, ReferenceOptions
from harness.errors import BadInput
from harness.io.bounds import GENERIC_MAX, RANGES
from harness.loadmodel.memory import MEMORY_DEFAULTS
from harness.loadmodel.planners import OPTION_DEFAULTS
from harness.loadmodel.workloads import PARAMS
from harness.runbook.load import load_runbook

from .conftest import FIXTURES, assert_bad_input, run_cli

BACKEND = "{name: echo, kind: reference, module: echo, select: true, time: true, " \
          "options: {launch: single}}"
ULTRAEP_KEYS = set(OPTION_DEFAULTS["ultraep"])


def numeric_options() -> list[tuple[str, str, type]]:
    """(section, key, int or float) of every number a nested option section takes."""
    out = []
    for defaults in OPTION_DEFAULTS.values():
        for key, val in defaults.items():
            if key in ("moe_num_echo_experts",) or (isinstance(val, (int, float))
                                                    and not isinstance(val, bool)):
                out.append(("planner", key, int if key == "moe_num_echo_experts"
                            else type(val)))
    out += [("memory", k, type(v)) for k, v in MEMORY_DEFAULTS.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    out += [("routing", k, t) for k, t in PARAMS.items() if t in (int, float)]
    return sorted(set(out))


OPTIONS = numeric_options()


def book(tmp_path: Path, section: str, key: str, value: object) -> Path:
    """The tiny runbook with `options.<section>: {<key>: value}` on its one backend (the
    ultraep personality for ultraep's planner options), in a fresh folder."""
    folder = tmp_path / "book"
    folder.mkdir(exist_ok=True)
    (folder / "models.yaml").write_bytes((FIXTURES / "models.yaml").read_bytes())
    module = "ultraep" if section == "planner" and key in ULTRAEP_KEYS else "echo"
    entry = BACKEND.replace("module: echo", f"module: {module}").replace(
        "launch: single}", f"launch: single,\n      {section}: {{{key}: {value!r}}}}}")
    text = (FIXTURES / "tiny.yaml").read_text()
    old = [line for line in text.splitlines() if line.startswith("  - {name: echo")][0]
    (folder / "tiny.yaml").write_text(text.replace(old, "  - " + entry))
    return folder / "tiny.yaml"


def test_every_numeric_option_declares_its_range():
    """Planner, memory and routing numbers, and every int/float field of a backend's
    options dataclass, have their own RANGES entry holding the default."""
    for section, key, _ in OPTIONS:
        assert f"{section}.{key}" in RANGES, f"{section}.{key}"
    assert set(NESTED_SECTIONS) == {"planner", "memory", "routing"}
    for defaults, section in ((OPTION_DEFAULTS["echo"], "planner"),
                              (OPTION_DEFAULTS["ultraep"], "planner"),
                              (MEMORY_DEFAULTS, "memory")):
        for key, val in defaults.items():
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                low, high = RANGES[f"{section}.{key}"]
                assert low <= val <= high, (section, key, val)
    for cls in (ReferenceOptions, MegatronCoreOptions, BaselineOptions, EchoOptions,
                UltraEPOptions):
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if int in typing.get_args(hint) or hint in (int, float):
                assert f.name in RANGES, (cls.__name__, f.name)


@st.composite
def out_of_range(draw) -> tuple[str, str, object]:
    section, key, kind = draw(st.sampled_from(OPTIONS))
    low, high = RANGES[f"{section}.{key}"]
    if kind is int:
        value = draw(st.one_of(st.integers(int(high) + 1, GENERIC_MAX),
                               st.integers(-GENERIC_MAX, int(low) - 1)))
    else:
        value = draw(st.one_of(st.floats(high, GENERIC_MAX, exclude_min=True),
                               st.floats(-GENERIC_MAX, low, exclude_max=True)))
    return section, key, value


@settings(max_examples=120, deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=out_of_range())
@example(case=("planner", "num_buckets", 10**15))
@example(case=("routing", "sigma", 1e15))
@example(case=("planner", "moe_num_echo_experts", -2))
def test_an_out_of_range_option_is_refused_at_its_line(tmp_path, case):
    section, key, value = case
    path = book(tmp_path, section, key, value)
    with pytest.raises(BadInput) as info:
        load_runbook(path)
    exc = info.value
    assert exc.field == f"backends[0].options.{section}.{key}", (case, str(exc))
    line = 1 + next(i for i, text in enumerate(path.read_text().splitlines())
                    if text.startswith(f"      {section}: {{{key}: "))
    assert exc.path == str(path) and exc.line == line, (case, str(exc))


@pytest.mark.parametrize("section,key,kind", OPTIONS)
def test_the_range_ends_are_accepted(tmp_path, section, key, kind):
    low, high = RANGES[f"{section}.{key}"]
    for value in (low, high):
        value = kind(value)
        if key == "moe_num_echo_experts":
            value -= value % 2                  # divisible by the runbook's ep
        if key == "hot_share":
            value = min(max(value, 0.01), 0.99)  # the workload's own check is strict
        load_runbook(book(tmp_path, section, key, value))


def test_the_probe_is_exit_2_with_file_line_and_field(tmp_path):
    path = book(tmp_path, "planner", "num_buckets", 10**15)
    path.write_text(path.read_text().replace("{num_buckets:", "{echo_algorithm: "
                                             "approx_bin_packing, num_buckets:"))
    res = run_cli("run", path, "--results", tmp_path / "r", "--dry-run", timeout_s=20)
    assert_bad_input(res, f"{path}:9: backends[0].options.planner.num_buckets: must be in")
    assert not (tmp_path / "r").exists()


# A number's key given text (YAML 1.1 reads `1e-3`, without a '.', as a string; found by the
# generator above with -1e-323) is refused at its key, not its section: the same field and
# line as an out-of-range number.
@settings(max_examples=40, deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(OPTIONS),
       text=st.one_of(st.from_regex(r"-?[1-9]e-?[0-9]{1,3}", fullmatch=True),
                      st.text("abcxyz_-", min_size=1, max_size=8)))
def test_text_for_a_number_is_refused_at_its_key(tmp_path, option, text):
    section, key, _ = option
    path = book(tmp_path, section, key, text)
    with pytest.raises(BadInput) as info:
        load_runbook(path)
    assert info.value.field == f"backends[0].options.{section}.{key}", str(info.value)
    assert "must be a number" in str(info.value)
