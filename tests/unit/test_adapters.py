"""Cluster adapters: golden argv per (model, backend, purpose), fp32 router, runbook and zoo.

Goldens live in tests/fixtures/golden/<MODEL>__<backend>__<purpose>.json. After an intended
change of the generated commands, regenerate them with

    EPCAP_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/test_adapters.py

and review the diff before committing.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import backends.megatron.base as megatron
from backends.megatron.args import flag_values
from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.campaign.estimate import CostModel
from harness.errors import BadInput
from harness.grid.capacity import UnexecutableCapacity, check_executable
from harness.launch.slurm_time import parse_time_limit
from harness.results.layout import PURPOSES, Cell
from harness.runbook.load import load_runbook
from harness.runbook.model import BackendConfig

ROOT = Path(__file__).resolve().parents[2]
TIERB = ROOT / "runbooks" / "tierb-b200-gbs8.yaml"
ZOO = ROOT / "runbooks" / "models.yaml"
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
REGEN = os.environ.get("EPCAP_REGEN_GOLDEN") == "1"
CAPACITY = {"canary": "2.00", "measure": "2.00", "validate": "1.25", "time": "1.25",
            "frontier": "1.25"}   # a frontier rung: timed like a time cell, at its rung


@pytest.fixture(scope="module")
def runbook():
    return load_runbook(TIERB)


def build(runbook, model: str, backend: str, purpose: str, capacity: str | None = None):
    """The LaunchSpec the campaign would get for one cell of the tierb runbook."""
    cell = Cell(runbook.campaign, model, backend, purpose, capacity or CAPACITY[purpose])
    req = RunRequest.for_cell(runbook, cell, Path("/results/cells") / cell.name)
    return load_backend(runbook.backend(backend)).command(req), req


def spec_dict(spec) -> dict:
    return {"argv": spec.argv, "env": spec.env, "ntasks": spec.ntasks, "nodes": spec.nodes,
            "gpus_per_node": spec.gpus_per_node, "cwd": spec.cwd}


CASES = [(m, b, p) for m in ("QWEN2_57B", "QWEN3_30B", "QWEN3_235B", "DEEPSEEK_V2_LITE")
         for b in ("echo", "ultraep", "moonep") for p in PURPOSES]


@pytest.mark.parametrize("model,backend,purpose", CASES)
def test_golden_argv(runbook, model, backend, purpose):
    spec, _ = build(runbook, model, backend, purpose)
    path = GOLDEN / f"{model}__{backend}__{purpose}.json"
    got = spec_dict(spec)
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n", encoding="utf-8")
    assert got == json.loads(path.read_text(encoding="utf-8")), f"regenerate: see {__doc__}"


def test_every_golden_has_a_case():
    names = {f"{m}__{b}__{p}.json" for m, b, p in CASES}
    assert {p.name for p in GOLDEN.glob("*.json")} == names


@pytest.mark.parametrize("model,backend,purpose", CASES)
def test_commands_are_printable_argv(runbook, model, backend, purpose):
    spec, _ = build(runbook, model, backend, purpose)
    assert all(isinstance(a, str) for a in spec.argv)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
    assert shlex.split(shlex.join(spec.argv)) == spec.argv
    assert spec.argv[:2] == ["torchrun", "--standalone"]
    assert (spec.ntasks, spec.nodes, spec.gpus_per_node) == (1, 1, 8)


def assert_fp32_router(argv: list[str]) -> None:
    """The check the fp32 test applies to every UltraEP command."""
    assert flag_values(argv, "--moe-router-dtype") == ["fp32"], f"UltraEP argv lacks --moe-router-dtype fp32: {argv}"


@pytest.mark.parametrize("model", ["QWEN2_57B", "QWEN3_30B", "QWEN3_235B", "DEEPSEEK_V2_LITE"])
def test_every_ultraep_command_has_fp32_router(runbook, model):
    for purpose in PURPOSES:
        spec, _ = build(runbook, model, "ultraep", purpose)
        assert_fp32_router(spec.argv)


def test_fp32_check_fails_without_the_flag(runbook):
    spec, _ = build(runbook, "QWEN2_57B", "ultraep", "measure")
    i = spec.argv.index("--moe-router-dtype")
    dropped = spec.argv[:i] + spec.argv[i + 2:]
    with pytest.raises(AssertionError, match="lacks"):
        assert_fp32_router(dropped)
    with pytest.raises(AssertionError):
        assert_fp32_router(spec.argv[:i + 1] + ["bf16"] + spec.argv[i + 2:])


def test_ultraep_refuses_command_without_fp32(runbook, monkeypatch):
    """If the model args ever stop emitting the router dtype, UltraEP refuses to launch."""
    real = megatron.model_args

    def without_dtype(model):
        args = real(model)
        i = args.index("--moe-router-dtype")
        return args[:i] + args[i + 2:]

    monkeypatch.setattr(megatron, "model_args", without_dtype)
    for backend in ("ultraep", "echo", "moonep"):       # the zoo says fp32: every backend
        with pytest.raises(BadInput, match="fp32"):
            build(runbook, "QWEN2_57B", backend, "measure")


def test_ultraep_refuses_bf16_router_and_flag_override(runbook):
    bf16 = replace(runbook, models=tuple(replace(m, router_dtype="bf16") for m in runbook.models))
    with pytest.raises(BadInput, match="router_dtype"):
        build(bf16, "QWEN2_57B", "ultraep", "measure")
    spec, _ = build(bf16, "QWEN2_57B", "echo", "measure")
    assert flag_values(spec.argv, "--moe-router-dtype") == ["bf16"]
    sneaky = replace(runbook, backends=tuple(
        replace(b, flags=("--moe-router-dtype", "fp64")) if b.name == "ultraep" else b
        for b in runbook.backends))
    with pytest.raises(BadInput, match="fp32"):
        build(sneaky, "QWEN2_57B", "ultraep", "measure")


def arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_model_args_follow_the_zoo(runbook):
    spec, _ = build(runbook, "QWEN2_57B", "echo", "measure")
    a = spec.argv
    assert (arg(a, "--num-layers"), arg(a, "--hidden-size"), arg(a, "--num-experts")) == \
        ("28", "3584", "64")
    assert (arg(a, "--moe-router-topk"), arg(a, "--moe-ffn-hidden-size")) == ("8", "2560")
    assert arg(a, "--moe-shared-expert-intermediate-size") == "20480"
    assert arg(a, "--num-query-groups") == "4" and "--moe-layer-freq" not in a
    ds, _ = build(runbook, "DEEPSEEK_V2_LITE", "echo", "measure")
    freq = arg(ds.argv, "--moe-layer-freq")
    assert freq == "([0]*1+[1]*26)"
    assert arg(ds.argv, "--ffn-hidden-size") == "10944"
    assert arg(ds.argv, "--moe-router-topk") == "6" and "--num-query-groups" not in ds.argv


def test_shape_phase_and_dispatcher_args(runbook):
    measure, _ = build(runbook, "QWEN3_30B", "ultraep", "measure", "2.00")
    a = measure.argv
    assert (arg(a, "--seq-length"), arg(a, "--micro-batch-size"),
            arg(a, "--global-batch-size"), arg(a, "--expert-model-parallel-size")) == \
        ("8192", "1", "8", "8")
    assert arg(a, "--train-iters") == arg(a, "--exit-interval") == "65"      # 0 + 65
    assert arg(a, "--moe-flex-dispatcher-backend") == "hybridep" and "--moe-enable-ultraep" in a
    assert "--moe-expert-rank-capacity-factor" not in a          # main only (ultraep.py)
    assert "--use-transformer-engine-op-fuser" not in a
    assert measure.env["MOE_DROP_DEBUG"] == "1" and "EPCAP_TIMING" not in measure.env
    assert measure.env["EPCAP_BUDGET_TOKENS"] == "131072"
    timed, _ = build(runbook, "QWEN3_30B", "moonep", "time", "1.03125")
    assert arg(timed.argv, "--train-iters") == "65"                          # 5 + 20 x 3
    assert arg(timed.argv, "--moe-token-dispatcher-type") == "moonep"
    assert "--moe-expert-rank-capacity-factor" not in timed.argv           # MoonEP: exactly N
    assert timed.env["EPCAP_TIMING"] == "1" and timed.env["EPCAP_TIMING_TRIALS"] == "3"
    assert timed.env["EPCAP_BUDGET_TOKENS"] == "67584"


def with_backend(runbook, name: str, **changes):
    return replace(runbook, backends=tuple(replace(b, **changes) if b.name == name else b
                                           for b in runbook.backends))


def test_runbook_options_override_dispatcher_env_and_flags(runbook):
    rb = with_backend(runbook, "echo", flags=("--moe-permute-fusion",), options={
        "dispatcher_args": ["--echo-backend", "{library}", "--echo-budget={budget}",
                            "--echo-pad", "{pad_multiple}"],
        "env": {"MOE_DROP_DEBUG": "0", "NCCL_DEBUG": "WARN"}, "torchrun": "/opt/bin/torchrun"})
    spec, _ = build(rb, "QWEN3_30B", "echo", "validate", "1.25")
    a = spec.argv
    assert a[0] == "/opt/bin/torchrun" and a[-1] == "--moe-permute-fusion"
    assert "--moe-flex-dispatcher-backend" not in a
    assert a[a.index("--echo-backend"):a.index("--echo-backend") + 4] == \
        ["--echo-backend", "echo", "--echo-budget=81920", "--echo-pad"]
    assert spec.env["MOE_DROP_DEBUG"] == "0" and spec.env["NCCL_DEBUG"] == "WARN"


def test_multi_node_trampoline_expands_only_the_rendezvous(runbook, tmp_path):
    rb = replace(runbook, slurm=replace(runbook.slurm, nodes=2),
                 shape=replace(runbook.shape, global_batch=16))
    rb = with_backend(rb, "echo", flags=("--weird=$HOME;`id`",), options={"torchrun": "echo"})
    spec, _ = build(rb, "QWEN3_30B", "echo", "measure")
    assert spec.argv[:3] == ["sh", "-c", megatron.RDZV_TRAMPOLINE]
    assert (spec.ntasks, spec.nodes) == (2, 2)
    assert arg(spec.argv, "--rdzv-id") == "QWEN3_30B__echo__measure__cap2p00__a1"
    env = {"PATH": os.environ["PATH"], "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29511"}
    out = subprocess.run(spec.argv, env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("--rdzv-endpoint 10.1.2.3:29511 --nnodes 2 --nproc-per-node 8")
    assert out.rstrip("\n").endswith("--weird=$HOME;`id`")        # user text never expanded


def test_topology_and_paths_are_checked(runbook):
    with pytest.raises(BadInput, match="gpus_per_node"):
        build(replace(runbook, slurm=replace(runbook.slurm, gpus_per_node=0)),
              "QWEN3_30B", "echo", "measure")
    with pytest.raises(BadInput, match="global_batch"):
        build(replace(runbook, shape=replace(runbook.shape, global_batch=12)),
              "QWEN3_30B", "echo", "measure")
    with pytest.raises(BadInput, match="not a multiple of ep"):
        build(replace(runbook, shape=replace(runbook.shape, ep=16, global_batch=16),
                      slurm=replace(runbook.slurm, gpus_per_node=12)),
              "QWEN3_30B", "echo", "measure")
    with pytest.raises(BadInput, match="paths.megatron"):
        build(with_backend(replace(runbook, paths={"data": "mock"}), "echo", options={}),
              "QWEN3_30B", "echo", "measure")


def test_real_data_uses_the_model_tokenizer(runbook):
    rb = replace(runbook, paths={**runbook.paths, "data": "/lustre/data/web_text_document"})
    spec, _ = build(rb, "QWEN3_30B", "moonep", "measure")
    assert arg(spec.argv, "--data-path") == "/lustre/data/web_text_document"
    assert arg(spec.argv, "--tokenizer-model") == "/lustre/fsw/moe/tokenizers/Qwen/Qwen3-30B-A3B"
    assert "--mock-data" not in spec.argv
    with pytest.raises(BadInput, match="paths.tokenizer"):
        build(replace(rb, paths={"megatron": "/m", "data": "/d"}), "QWEN3_30B", "echo", "measure")


def test_failure_patterns_merge_runbook_additions():
    cfg = BackendConfig("ultraep", "cluster", "ultraep",
                        options={"failure_patterns": {"infra": ["GPU fell off the bus"]}})
    pats = load_backend(cfg).failure_patterns()
    assert "GPU fell off the bus" in pats["infra"]
    assert r"ultra_ep\.cpp:909" in pats["assert"] and "AssertionError" in pats["assert"]
    assert len(pats["assert"]) == len(set(pats["assert"]))


def test_zoo_matches_public_configs_and_router_is_explicit():
    raw = yaml.safe_load(ZOO.read_text(encoding="utf-8"))["models"]
    assert all(entry["router_dtype"] == "fp32" for entry in raw.values())   # written, not default
    want = {"QWEN2_57B": (28, 3584, 64, 8, 2560, 20480, 28, 4, 151936),
            "QWEN3_30B": (48, 2048, 128, 8, 768, 0, 32, 4, 151936),
            "QWEN3_235B": (94, 4096, 128, 8, 1536, 0, 64, 4, 151936),
            "DEEPSEEK_V2_LITE": (27, 2048, 64, 6, 1408, 2816, 16, 16, 102400)}
    keys = ("layers", "hidden", "experts", "topk", "expert_ffn", "shared_ffn", "heads",
            "kv_heads", "vocab")
    assert {name: tuple(raw[name][k] for k in keys) for name in want} == want
    assert raw["DEEPSEEK_V2_LITE"]["first_dense_layers"] == 1
    assert raw["DEEPSEEK_V2_LITE"]["shared_experts"] == 2


def test_tierb_runbook_plan_inputs(runbook):
    assert runbook.launcher == "slurm" and runbook.capacity.decimals is None
    assert [(b.name, b.select, b.time) for b in runbook.backends] == \
        [("echo", True, True), ("ultraep", True, True), ("moonep", False, True),
         ("mcore-alltoall", False, True), ("mcore-deepep", False, True),
         ("mcore-hybridep", False, True)]
    assert {"blackwell_run_scripts", "megatron-lm", "echo", "ultraep", "moonep"} <= \
        set(runbook.repositories)
    ns = {m.name: runbook.shape.uniform_tokens(m.topk) for m in runbook.models}
    assert ns["QWEN3_30B"] == 65536 and ns["DEEPSEEK_V2_LITE"] == 49152
    for n in ns.values():
        assert check_executable(runbook.capacity.measure, n, runbook.capacity.pad_multiple) \
            == 2 * n


def test_unexecutable_capacity_is_refused_with_numbers():
    with pytest.raises(UnexecutableCapacity, match=r"1\.02 at N=65536 gives budget 66846"):
        check_executable("1.02", 65536, 128)
    assert check_executable("1.03125", 65536, 128) == 67584               # boundary: 528 x 128


def test_cell_wall_hours_is_the_prior_of_an_uncalibrated_kind(runbook, tmp_path, capsys):
    """A GPU runbook has no calibrated rate: its cost model is the runbook's cell_wall_hours
    (said to be an estimate); the old gpu_hours_per_cell key is read with a deprecation."""
    model = CostModel.of(runbook)
    assert model is not None and model.band is None and "your estimate" in model.source()
    assert model.prior("echo", runbook.models[0].name, "measure") == pytest.approx(0.25 * 3600)
    assert CostModel.of(replace(runbook, cell_wall_hours=None)) is None
    (tmp_path / "models.yaml").write_text((ROOT / "runbooks" / "models.yaml").read_text())
    old = tmp_path / "old.yaml"
    old.write_text(TIERB.read_text().replace("cell_wall_hours:", "gpu_hours_per_cell:"))
    assert load_runbook(old).cell_wall_hours == 0.25
    assert "gpu_hours_per_cell is deprecated" in capsys.readouterr().err


@pytest.mark.parametrize("text,hours", [("01:00:00", 1.0), ("30", 0.5), ("90:00", 1.5),
                                        ("1-00", 24.0), ("1-02:30", 26.5),
                                        ("2-00:00:36", 48.01)])
def test_parse_time_limit(text, hours):
    assert parse_time_limit(text) == pytest.approx(hours)


@pytest.mark.parametrize("text", ["1:2:3:4", "ab", "-5", "1-x", "UNLIMITED"])
def test_parse_time_limit_rejects(text):
    with pytest.raises(BadInput, match="slurm.time_limit"):
        parse_time_limit(text)


def test_tierb_with_unexecutable_measure_capacity_is_refused(tmp_path):
    """The Tier B runbook with capacity 1.02 never reaches a launcher: N, budget, next rung."""
    (tmp_path / "models.yaml").write_text(ZOO.read_text(encoding="utf-8"), encoding="utf-8")
    text = TIERB.read_text(encoding="utf-8").replace('measure: "2.00"', 'measure: "1.02"')
    assert 'measure: "1.02"' in text
    bad = tmp_path / "tierb-102.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        load_runbook(bad)
    msg = str(err.value)
    assert "tierb-102.yaml" in msg and "capacity" in msg and "1.02" in msg
    assert "65536" in msg and "66846" in msg


def test_telemetry_tags_default_to_spec_and_can_be_overridden():
    assert load_backend(BackendConfig("moonep", "cluster", "moonep")).telemetry_tags() is None
    tags = {"dispatch": "[MOONEP][recv]", "setup": "[MOONEP][plan]"}
    cfg = BackendConfig("moonep", "cluster", "moonep", options={"telemetry_tags": tags})
    assert load_backend(cfg).telemetry_tags() == tags
