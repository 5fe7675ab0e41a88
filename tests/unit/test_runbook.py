"""Runbook loading: schema, canonical capacities, and errors naming file:line: field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import BadInput
from harness.runbook.load import load_runbook
from harness.runbook.zoo import read_zoo, zoo_model

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "runbooks"
ZOO = ROOT / "runbooks" / "models.yaml"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "rb.yaml"
    path.write_text(f"models_file: {ZOO}\n" + body)
    return path


BASE = """campaign: t
models: [QWEN3_30B]
shape: {seq: 128, micro_batch: 1, global_batch: 2, ep: 2}
backends:
  - {name: echo, kind: reference, module: echo}
"""


def test_shipped_runbooks_load():
    local = load_runbook(ROOT / "runbooks" / "local-cpu.yaml")
    assert local.campaign == "local-cpu" and local.shape.ep == 4
    assert [m.name for m in local.models] == ["QWEN2_57B", "QWEN3_30B", "QWEN3_235B",
                                              "DEEPSEEK_V2_LITE"]
    assert [m.experts for m in local.models] == [64, 128, 128, 64]      # real expert counts
    assert [m.topk for m in local.models] == [8, 8, 8, 6]
    assert local.device_memory_bytes == 12 * 2**20
    assert [(b.name, b.select, b.time) for b in local.backends] == [
        ("echo", True, True), ("ultraep", True, True), ("moonep", False, True),
        ("mcore-alltoall", False, True), ("mcore-deepep", False, True),
        ("mcore-hybridep", False, True)]
    reduced = load_runbook(FIX / "reduced.yaml")
    assert len(reduced.models) == 2 and len(reduced.backends) == 3
    tier = load_runbook(ROOT / "runbooks" / "tierb-b200-gbs8.yaml")
    assert tier.launcher == "slurm" and tier.capacity.measure == "2.00"


def test_defaults_and_overrides(tmp_path):
    rb = load_runbook(write(tmp_path, BASE.replace("[QWEN3_30B]",
                                                   "[{name: QWEN3_30B, layers: 2, hidden: 64}]")))
    model = rb.model("QWEN3_30B")
    assert (model.layers, model.hidden, model.experts, model.topk) == (2, 64, 128, 8)
    assert rb.capacity.measure == "2.00" and rb.capacity.decimals is None
    assert rb.device_memory_bytes is None and rb.max_parallel_cells == 1
    assert rb.backend("echo").select and rb.backend("echo").time


@pytest.mark.parametrize("written, canonical", [
    ("2", "2.00"), ("2.0", "2.00"), ('"2.0"', "2.00"), ("1.5", "1.50"), ('"1.125"', "1.125"),
    ("1.250", "1.25"), ("4", "4.00"), ("4.000", "4.00")])
def test_capacity_canonical(tmp_path, written, canonical):
    rb = load_runbook(write(tmp_path, BASE + f"capacity: {{measure: {written}}}\n"))
    assert rb.capacity.measure == canonical


def test_grid_decimals(tmp_path):
    rb = load_runbook(write(tmp_path, BASE + "capacity: {grid: decimals-2}\n"))
    assert rb.capacity.decimals == 2 and str(rb.capacity.grid) == "decimals-2"
    assert str(load_runbook(write(tmp_path, BASE)).capacity.grid) == "exact"


def test_one_zoo_reader_for_the_runbook_and_the_forecast(tmp_path):
    zoo = read_zoo(ZOO)
    assert zoo_model("QWEN3_30B") == zoo.models["QWEN3_30B"]
    assert load_runbook(write(tmp_path, BASE)).model("QWEN3_30B").experts == \
        zoo.models["QWEN3_30B"]["experts"]
    with pytest.raises(BadInput, match=r"models.yaml: --model: unknown model 'NOPE'; known: "):
        zoo_model("NOPE")
    (tmp_path / "other.yaml").write_text("secret: hunter2\n")
    with pytest.raises(BadInput, match="not a models file") as info:
        zoo_model("QWEN3_30B", tmp_path / "other.yaml")
    assert "hunter2" not in str(info.value) and info.value.field == "--model"


def test_device_memory_gib(tmp_path):
    rb = load_runbook(write(tmp_path, BASE + "device_memory_gb: 0.5\n"))
    assert rb.device_memory_bytes == 2**29


@pytest.mark.parametrize("name, line, field, words", [
    ("unknown_model.yaml", 9, "models[0]", "unknown model 'QWEN9_1T'; known: DEEPSEEK_V2_LITE"),
    ("unexecutable_capacity.yaml", 16, "capacity.measure", "budget int(1.02 x 1024) = 1044"),
    ("wrong_type.yaml", 11, "shape.seq", "must be an integer"),
    ("bad_kind.yaml", 14, "backends[1].kind", "must be reference or cluster"),
    ("bool_type.yaml", 15, "backends[2].select", "must be true or false"),
    ("unknown_key.yaml", 23, "sead", "unknown key"),
    ("syntax_error.yaml", 19, None, "YAML syntax error"),
])
def test_bad_runbooks_name_file_line_field(name, line, field, words):
    path = FIX / "bad" / name
    with pytest.raises(BadInput) as info:
        load_runbook(path)
    err = info.value
    assert err.path == str(path) and err.line == line and err.field == field
    assert str(err).startswith(f"{path}:{line}: ") and words in str(err)
    assert err.exit_code == 2


@pytest.mark.parametrize("body, line, field", [
    (BASE.replace("[QWEN3_30B]", "[{name: QWEN3_30B, layerz: 2}]"), 3, "models[0].layerz"),
    (BASE + "capacity: {grid: fine}\n", 7, "capacity.grid"),
    (BASE + "capacity: {measure: abc}\n", 7, "capacity.measure"),
    (BASE + "capacity: {measure: -1}\n", 7, "capacity.measure"),
    (BASE + "launcher: k8s\n", 7, "launcher"),
    (BASE + "timing: {iters: 0}\n", 7, "timing.iters"),
    (BASE.replace("ep: 2}", "ep: 2, tp: 1}"), 4, "shape.tp"),
    (BASE.replace("campaign: t", "campaign: ../x"), 2, "campaign"),
    (BASE + "  - {name: ECHO, kind: reference}\n", 7, "backends[1].name"),
])
def test_more_errors(tmp_path, body, line, field):
    with pytest.raises(BadInput) as info:
        load_runbook(write(tmp_path, body))
    assert (info.value.line, info.value.field) == (line, field)


def test_missing_file_and_zoo(tmp_path):
    with pytest.raises(BadInput, match="file not found"):
        load_runbook(tmp_path / "nope.yaml")
    path = tmp_path / "rb.yaml"
    path.write_text("models_file: nowhere.yaml\n" + BASE)
    with pytest.raises(BadInput, match="nowhere.yaml: models_file: file not found"):
        load_runbook(path)


def test_bad_runbook_leaves_earlier_results_untouched(tmp_path):
    """exit 2 from the CLI, and an existing campaign directory keeps every byte."""
    results = tmp_path / "results"
    camp = results / "reduced"
    camp.mkdir(parents=True)
    (camp / "events.jsonl").write_text('{"ev": "campaign_start", "t": 1}\n')
    (camp / "capacity_attempts.tsv").write_text("campaign\tmodel\nreduced\tX\n")
    before = {p.name: p.read_bytes() for p in camp.iterdir()}
    for bad in sorted((FIX / "bad").glob("*.yaml")):
        result = CliRunner().invoke(main, ["run", str(bad), "--results", str(results)])
        assert result.exit_code == 2, (bad.name, result.output)
        assert f"{bad}:" in result.output
    assert {p.name: p.read_bytes() for p in camp.iterdir()} == before
    assert sorted(p.name for p in results.iterdir()) == ["reduced"]


OPTS = BASE.replace("module: echo}", "module: echo,\n     options: {launch: single, %s}}")


@pytest.mark.parametrize("option, field, words", [
    ("lunch: single", "backends[0].options.lunch", "unknown key"),
    ("threads: many", "backends[0].options.threads", "must be an integer"),
    ("device: tpu", "backends[0].options.device", "is not auto, cpu or cuda"),
])
def test_backend_options_are_checked_at_load(tmp_path, option, field, words):
    """Each backend's options dataclass is validated when the runbook loads (file:line)."""
    with pytest.raises(BadInput, match=words) as info:
        load_runbook(write(tmp_path, OPTS % option))
    assert (info.value.line, info.value.field) == (7, field)      # the options line


def test_backend_options_are_typed_and_cluster_modules_are_found(tmp_path):
    rb = load_runbook(write(tmp_path, OPTS % "threads: 2"))
    opts = rb.backends[0].options
    assert (type(opts).__name__, opts.launch, opts.threads, opts.device) == (
        "ReferenceOptions", "single", 2, "auto")
    body = BASE.replace("kind: reference, module: echo", "kind: cluster, module: nosuch")
    with pytest.raises(BadInput, match="no backend module 'backends.megatron.nosuch'") as info:
        load_runbook(write(tmp_path, body))
    assert info.value.field == "backends[0].module"


def test_timing_defaults_and_shipped_settings(tmp_path):
    t = load_runbook(write(tmp_path, BASE)).timing
    assert (t.launches, t.baseline, t.max_cv, t.control) == (3, None, 0.05, False)
    rb = load_runbook(write(tmp_path, BASE + "  - {name: ultra, kind: reference, module: "
                            "ultraep}\ntiming: {baseline: ultra, launches: 5, max_cv: 0.1, "
                            "control: true}\n"))
    assert rb.baseline == "ultra" and rb.timing.launches == 5 and rb.timing.control
    assert rb.backend("ultra~control").name == "ultra"
    local = load_runbook(ROOT / "runbooks" / "local-cpu.yaml").timing
    assert (local.launches, local.max_cv, local.control) == (3, 0.25, True)
    tier = load_runbook(ROOT / "runbooks" / "tierb-b200-gbs8.yaml").timing
    assert (tier.launches, tier.max_cv, tier.control) == (3, 0.05, True)
    assert (t.resolution, t.max_launches, t.launch_cap) == (None, None, 3)


def test_timing_resolution_and_launch_cap(tmp_path):
    t = load_runbook(write(tmp_path, BASE + "timing: {resolution: 0.03}\n")).timing
    assert (t.resolution, t.max_launches, t.launch_cap) == (0.03, None, 10)
    t = load_runbook(write(tmp_path, BASE + "timing: {resolution: 0.03, launches: 12}\n")).timing
    assert t.launch_cap == 12
    t = load_runbook(write(tmp_path, BASE + "timing: {resolution: 0.05, max_launches: 6}\n")).timing
    assert (t.resolution, t.launch_cap) == (0.05, 6)


@pytest.mark.parametrize("body, field, words", [
    (BASE + "timing: {launches: 0}\n", "timing.launches", "between 1 and 64"),
    (BASE + "timing: {launches: 65}\n", "timing.launches", "between 1 and 64"),
    (BASE + "timing: {resolution: 0}\n", "timing.resolution", "between 0 and 1"),
    (BASE + "timing: {resolution: 1.5}\n", "timing.resolution", "between 0 and 1"),
    (BASE + "timing: {resolution: fine}\n", "timing.resolution", "number"),
    (BASE + "timing: {max_launches: 8}\n", "timing.max_launches", "without a resolution"),
    (BASE + "timing: {resolution: 0.03, launches: 4, max_launches: 3}\n",
     "timing.max_launches", "between timing.launches \\(4\\) and 64"),
    (BASE + "timing: {resolution: 0.03, max_launches: 65}\n", "timing.max_launches",
     "and 64"),
    (BASE + "timing: {max_cv: 0}\n", "timing.max_cv", "positive"),
    (BASE + "timing: {baseline: moonep}\n", "timing.baseline", "not a timed backend"),
    (BASE + "timing: {control: maybe}\n", "timing.control", "true or false"),
    (BASE + "  - {name: echo~control, kind: reference, module: echo}\n", "backends[1].name",
     "reserved"),
])
def test_timing_errors_name_the_field(tmp_path, body, field, words):
    with pytest.raises(BadInput, match=words) as info:
        load_runbook(write(tmp_path, body))
    assert info.value.field == field
