"""Hostile runbooks and models files through `epcap run` (issue 17): each ends with exit 2
naming file:line: field within a time bound, no traceback, nothing written, and nothing of a
non-runbook file's content in the output."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.runbook.load import load_runbook

from .conftest import assert_bad_input, run_cli

SECRET_LINE = "root:$6$SecretShadowHash0123:19000:0:99999:7:::"


def edit(book: Path, old: str, new: str) -> Path:
    text = book.read_text()
    assert old in text, old
    book.write_text(text.replace(old, new, 1))
    return book


def run_refused(book: Path, tmp_path: Path, *needles: str):
    """`epcap run` refuses: exit 2 naming the needles, no results directory made."""
    results = tmp_path / "results"
    res = run_cli("run", book, "--results", results, timeout_s=20)
    assert_bad_input(res, *needles)
    assert not results.exists(), "results written for a refused runbook"
    return res


# -- numbers: finite, positive, within the documented maxima (harness/io/bounds.py) ---------------
NUMBERS = [
    ("seed: 1234", "seed: 100000000000000000000000", "tiny.yaml:14: seed: must be in"),
    ("seed: 1234", "seed: -1", "seed: must be in"),
    ("ep: 2}", "ep: 1000000}", "shape.ep: must be in"),
    ("ep: 2}", "ep: 0}", "shape.ep: must be in"),
    ("seq: 128", "seq: 99999999999999999999", "shape.seq: must be in"),
    ("iters: 2}", "iters: 100000000000000000000000}", "measure.iters: must be in"),
    ("iters: 2,", "iters: 0,", "timing.iters: must be in"),
    ("trials: 2}", "trials: 100000}", "timing.trials: must be in"),
    ("pad_multiple: 128", "pad_multiple: 99999999999999999999999", "capacity.pad_multiple"),
    ("pad_multiple: 128", "pad_multiple: 0", "capacity.pad_multiple"),
    ("run_timeout_s: 60", "run_timeout_s: .nan", "limits.run_timeout_s: must be a finite"),
    ("run_timeout_s: 60", "run_timeout_s: .inf", "limits.run_timeout_s: must be a finite"),
    ("run_timeout_s: 60", "run_timeout_s: 0", "limits.run_timeout_s: must be in"),
    ("run_timeout_s: 60", "run_timeout_s: 1.0e+12", "limits.run_timeout_s: must be in"),
    ("infra_retries: 1", "infra_retries: 1000000", "limits.infra_retries: must be in"),
    ("seed: 1234", "seed: 1234\ndevice_memory_gb: .nan", "device_memory_gb: must be a finite"),
    ("seed: 1234", "seed: 1234\ndevice_memory_gb: .inf", "device_memory_gb: must be a finite"),
    ("seed: 1234", "seed: 1234\ndevice_memory_gb: 1.0e-300", "device_memory_gb: must be in"),
    ("seed: 1234", "seed: 1234\ndevice_memory_gb: -4", "device_memory_gb: must be in"),
    ("seed: 1234", "seed: 1234\nmax_parallel_cells: 100000", "max_parallel_cells: must be in"),
    ("seed: 1234", "seed: 1234\ngpu_hours_per_cell: .nan", "gpu_hours_per_cell"),
    ("seed: 1234", "seed: 1234\ncell_wall_hours: .nan", "cell_wall_hours"),
    ('measure: "2.00"', 'measure: "1e309"', "capacity.measure: must be a positive capacity"),
    ('measure: "2.00"', 'measure: "NaN"', "capacity.measure: must be a positive capacity"),
    ('measure: "2.00"', 'measure: "-1"', "capacity.measure: must be a positive capacity"),
    ('measure: "2.00"', 'measure: "2.' + "0" * 40 + '"', "capacity.measure"),
    ("grid: exact", "grid: decimals-99999999999999", "capacity.grid"),
    ("hidden: 32,", "hidden: 10000000000,", "models[0].hidden: must be in"),
    ("layers: 2,", "layers: 100000,", "models[0].layers: must be in"),
    ("seed: 1234", "seed: " + "9" * 100_000, "tiny.yaml:14"),
    ("seed: 1234", "seed: 1.5", "seed: must be an integer"),
    ("seed: 1234", "seed: true", "seed: must be an integer"),
]


@pytest.mark.parametrize("old,new,needle", NUMBERS, ids=[n[1][:40] for n in NUMBERS])
def test_out_of_range_numbers_are_refused_at_load(tiny, tmp_path, old, new, needle):
    run_refused(edit(tiny, old, new), tmp_path, needle)


# -- campaign name: non-blank, at most 100 characters, a plain directory name ---------------
NAMES = ['" "', '""', "a" * 300, "../escape", ".hidden", "a/b", '"x\\ty"', "-dash", "'ünï'"]


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_unsafe_campaign_names_are_refused(tiny, tmp_path, name):
    res = run_refused(edit(tiny, "campaign: tiny", f"campaign: {name}"), tmp_path,
                      "tiny.yaml:2: campaign: must")
    assert len(res.err) < 400


def test_longest_campaign_name_is_accepted(tiny):
    assert load_runbook(edit(tiny, "campaign: tiny", "campaign: " + "a" * 100)).campaign


# -- YAML bombs and odd files --------------------------------------------------------------
def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


YAML_BOMBS = [
    ("billion laughs", billion_laughs(), "alias expansion"),
    ("recursive alias", "campaign: &x [*x]\n", "tiny.yaml:1: recursive YAML alias"),
    ("self mapping", "a: &x {b: *x}\n", "recursive YAML alias"),
    ("deep flow", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
    ("deep block", "".join("  " * i + f"k{i}:\n" for i in range(200)), "nested deeper"),
    ("tab", "campaign:\tx\n\tfoo: 1\n", "YAML syntax error"),
    ("bad utf8", b"campaign: \xff\xfe\n", "not UTF-8"),
    ("binary", b"\x00\x01\x02" * 100, "tiny.yaml:1: a control character (U+0000) at column 1"),
    ("empty", b"", "missing required key"),
    ("list", b"- 1\n- 2\n", "must be a mapping"),
    ("duplicate key", "campaign: a\ncampaign: b\n", "tiny.yaml:2: campaign: duplicate key"),
]


@pytest.mark.parametrize("name,text,needle", YAML_BOMBS, ids=[b[0] for b in YAML_BOMBS])
def test_yaml_bombs_and_garbage_are_refused_quickly(tiny, tmp_path, name, text, needle):
    (tiny.write_bytes if isinstance(text, bytes) else tiny.write_text)(text)
    run_refused(tiny, tmp_path, needle)


def test_recursive_alias_with_a_valid_runbook_around_it(tiny, tmp_path):
    text = tiny.read_text().replace("seed: 1234", "seed: 1234\npaths: &p {a: *p}")
    tiny.write_text(text)
    run_refused(tiny, tmp_path, "recursive YAML alias")


def test_a_runbook_over_one_mebibyte_is_refused_without_reading_it(tiny, tmp_path):
    with open(tiny, "a") as fh:
        fh.write("# " + "x" * (2 << 20) + "\n")
    run_refused(tiny, tmp_path, "file too large")


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "fifo", "directory"])
def test_special_files_as_runbook_or_models_file(tiny, tmp_path, target):
    if target == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)                         # nothing ever writes it: must not block
    elif target == "directory":
        path = tmp_path / "adir"
        path.mkdir()
    else:
        path = Path(target)
    if target == "directory":               # click refuses it first, also with exit 2
        res = run_cli("run", path, "--results", tmp_path / "results")
        assert res.code == 2 and "is a directory" in res.err and "Traceback" not in res.err
    else:
        run_refused(path, tmp_path, str(path), "must be a regular file")
    run_refused(edit(tiny, "models_file: models.yaml", f"models_file: {path}"), tmp_path,
                str(path), "models_file: must be a regular file")


# -- a models file that is not one: say nothing of what it holds ---------------------------
NOT_MODELS = [
    SECRET_LINE + "\n",
    SECRET_LINE + "\nbin:x:1:1:bin:/bin:/usr/sbin/nologin\n",
    f"{SECRET_LINE}: 1\n",                      # a mapping whose key is the secret
    f"models: 1\n{SECRET_LINE}: 2\n",           # an extra top-level key
    f"[{SECRET_LINE}]\n",
    f'"{SECRET_LINE}\n',                        # unterminated quote: a syntax error
    f"*{SECRET_LINE[:20]}\n",                   # undefined alias named like the content
    f"!{SECRET_LINE[:20]} x\n",                 # unknown tag named like the content
    f"models: !{SECRET_LINE[:20]} x\n",
]


@pytest.mark.parametrize("content", NOT_MODELS, ids=range(len(NOT_MODELS)))
def test_models_file_content_is_never_echoed(tiny, tmp_path, content):
    secret = tmp_path / "shadow"
    secret.write_text(content)
    res = run_refused(edit(tiny, "models_file: models.yaml", f"models_file: {secret}"),
                      tmp_path, str(secret))
    for piece in ("SecretShadowHash", "root:", "nologin"):
        assert piece not in res.text, res.text


@pytest.mark.skipif(not os.access("/etc/shadow", os.R_OK) and not os.path.exists("/etc/shadow"),
                    reason="no /etc/shadow on this machine")
def test_etc_shadow_as_models_file(tiny, tmp_path):
    res = run_refused(edit(tiny, "models_file: models.yaml", "models_file: /etc/shadow"),
                      tmp_path, "/etc/shadow")
    assert "root:" not in res.text


def test_missing_models_file(tiny, tmp_path):
    run_refused(edit(tiny, "models_file: models.yaml", "models_file: nope.yaml"), tmp_path,
                "nope.yaml: models_file: file not found")


def test_bad_backend_module_is_refused_with_line_and_nothing_created(tiny, tmp_path):
    run_refused(edit(tiny, "module: echo,", "module: no_such_backend,"), tmp_path,
                "tiny.yaml:8: backends[0].module: backend 'echo': 'no_such_backend' is not one of")


def test_error_messages_stay_short_for_huge_values(tiny, tmp_path):
    res = run_refused(edit(tiny, "campaign: tiny", "campaign: tiny\nlauncher: " + "z" * 50_000),
                      tmp_path, "launcher")
    assert len(res.err) < 500


# -- fuzzing the loader -----------------------------------------------------------------------
YAMLISH = st.text(alphabet=st.sampled_from(list("ab:-&*[]{}!|>'\"#\n\t ,.0129e%@`\\")),
                  max_size=120)


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=YAMLISH)
def test_fuzz_loader_only_ever_raises_bad_input(tiny, text):
    tiny.write_text(text)
    try:
        load_runbook(tiny)
    except BadInput as exc:
        assert str(exc).startswith(str(tiny))
        assert "\n" not in str(exc) or "YAML" in str(exc)


@settings(max_examples=60, deadline=3000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["seed", "ep", "iters", "pad_multiple", "run_timeout_s",
                            "device_memory_gb", "hidden"]),
       value=st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=20)))
def test_fuzz_numbers_in_a_valid_runbook(tiny, key, value):
    text = (Path(__file__).parent / "fixtures" / "tiny.yaml").read_text()
    rendered = repr(value) if not isinstance(value, float) else (
        ".nan" if value != value else ".inf" if value == float("inf") else
        "-.inf" if value == float("-inf") else repr(value))
    patched = re.sub(rf"\b{key}: [^,}}\n]+", lambda _m: f"{key}: {rendered}", text, count=1)
    if key == "device_memory_gb":
        patched += f"device_memory_gb: {rendered}\n"
    tiny.write_text(patched)
    try:
        rb = load_runbook(tiny)
    except BadInput as exc:
        assert str(exc).startswith(f"{tiny}:")
        return
    assert rb.seed <= 2**32 and rb.shape.ep <= 4096 and rb.limits.run_timeout_s < 1e7
