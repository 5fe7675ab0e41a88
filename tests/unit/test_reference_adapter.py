"""Reference adapter: RunRequest -> argv the worker parses back; process model helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backends.ranks import rank_env
from backends.reference.options import build_parser
from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.results.layout import Cell
from harness.runbook.model import BackendConfig, ModelSpec, PhaseConfig, Shape

MODEL = ModelSpec(name="TINY", hf_name="x/y", layers=3, hidden=64, experts=16, topk=4,
                  expert_ffn=32, shared_ffn=48, first_dense_layers=1, router_dtype="bf16",
                  routing_sigma=1.5)


def _req(timed=False, record_routing=False, mem=1 << 30, backend="ultraep"):
    return RunRequest(cell=Cell("c", "TINY", backend, "measure", "1.25"), model=MODEL,
                      shape=Shape(seq=128, micro_batch=2, global_batch=8, ep=4),
                      backend=BackendConfig(backend, "reference", backend),
                      phase=PhaseConfig(warmup=1, iters=3, trials=2), pad_multiple=128,
                      seed=99, cell_dir=Path("/tmp/cell"), device_memory_bytes=mem,
                      timed=timed, record_routing=record_routing)


def test_command_round_trips_through_the_worker_parser():
    req = _req(timed=True)
    spec = load_backend(req.backend).command(req)
    assert spec.argv[:3] == [sys.executable, "-m", "backends.reference"]
    assert spec.ntasks == 4 and spec.env["OMP_NUM_THREADS"] == "1"
    a = build_parser().parse_args(spec.argv[3:])
    assert (a.model, a.layers, a.first_dense_layers, a.hidden, a.experts, a.topk) == \
        ("TINY", 3, 1, 64, 16, 4)
    assert (a.expert_ffn, a.shared_ffn, a.router_dtype, a.routing_sigma) == (32, 48, "bf16", 1.5)
    assert (a.seq, a.micro_batch, a.ep, a.capacity, a.personality) == (128, 2, 4, "1.25", "ultraep")
    assert (a.warmup, a.iters, a.trials, a.timed, a.seed) == (1, 3, 2, True, 99)
    assert build_parser().parse_args(load_backend(req.backend).command(_req()).argv[3:]).timed \
        is False
    assert (a.device_memory_bytes, a.pad_multiple, a.ranks) == (1 << 30, 128, None)


def test_no_memory_flag_without_device_memory_and_flags_appended():
    req = _req(mem=None)
    cfg = BackendConfig("echo", "reference", "echo", flags=("--bogus",),
                        options={"device": "cpu", "trace": "/t.jsonl"})
    argv = load_backend(cfg).command(req).argv
    assert "--device-memory-bytes" not in argv and argv[-1] == "--bogus"
    assert argv[argv.index("--device") + 1] == "cpu" and "/t.jsonl" in argv


def test_single_launch_is_one_task_that_spawns_the_ranks():
    cfg = BackendConfig("echo", "reference", "echo", options={"launch": "single"})
    spec = load_backend(cfg).command(_req())
    assert spec.ntasks == 1 and spec.argv[-2:] == ["--ranks", "4"]
    with pytest.raises(ValueError, match="launch"):
        load_backend(BackendConfig("e", "reference", "echo",
                                   options={"launch": "x"})).command(_req())


def test_unknown_personality_is_rejected():
    with pytest.raises(ValueError, match="personality"):
        load_backend(BackendConfig("x", "reference", "nccl-ep")).command(_req())


def test_rank_env_torchrun_and_slurm():
    assert rank_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)
    assert rank_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}) == (5, 8, 1)
    assert rank_env({"RANK": "2", "WORLD_SIZE": "4", "SLURM_PROCID": "0",
                     "SLURM_NTASKS": "1"}) == (2, 4, 2)
    assert rank_env({}) is None


def test_bad_flag_exits_2_before_torch_loads():
    base = ["--layers", "2", "--hidden", "8", "--experts", "4", "--topk", "2",
            "--expert-ffn", "8", "--seq", "8", "--ep", "2"]
    proc = subprocess.run([sys.executable, "-m", "backends.reference", *base, "--bogus"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "backends.reference", *base[:-1], "3"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "divisible" in proc.stderr


def test_extra_dispatch_passes_option_is_off_by_default_and_passed_when_set():
    assert build_parser().parse_args(["--layers", "1", "--hidden", "8", "--experts", "4",
                                      "--topk", "2", "--expert-ffn", "8", "--seq", "8",
                                      "--ep", "2"]).extra_dispatch_passes == 0
    argv = load_backend(BackendConfig("echo", "reference", "echo")).command(_req()).argv
    assert "--extra-dispatch-passes" not in argv
    cfg = BackendConfig("slow", "reference", "echo", options={"extra_dispatch_passes": 2})
    a = build_parser().parse_args(load_backend(cfg).command(_req()).argv[3:])
    assert a.extra_dispatch_passes == 2


def test_runs_asked_for_their_routing_record_it_for_the_forecast():
    cfg = BackendConfig("echo", "reference", "echo")
    argv = load_backend(cfg).command(_req(record_routing=True)).argv
    assert argv[argv.index("--record-trace") + 1] == str(Path("/tmp/cell/routing_trace.jsonl"))
    assert "--record-trace" not in load_backend(cfg).command(_req()).argv
    off = BackendConfig("echo", "reference", "echo", options={"record_routing": False})
    assert "--record-trace" not in load_backend(off).command(_req(record_routing=True)).argv
    mine = BackendConfig("echo", "reference", "echo", options={"record_trace": "/x.jsonl"})
    argv = load_backend(mine).command(_req(record_routing=True)).argv
    assert argv.count("--record-trace") == 1 and "/x.jsonl" in argv


def test_planner_memory_and_routing_options_reach_the_worker():
    cfg = BackendConfig("echo", "reference", "echo",
                        options={"planner": {"threshold_multiplier": 0.1},
                                 "memory": {"optimizer": "adam"},
                                 "routing": {"workload": "hot_rank", "hot_share": 0.6}})
    spec = load_backend(cfg).command(_req(backend="echo"))
    ap = build_parser()
    a = ap.parse_args(spec.argv[3:])
    from backends.reference.options import check_args
    check_args(ap, a)
    assert a.planner_options["threshold_multiplier"] == 0.1
    assert a.memory_options["optimizer"] == "adam"
    assert a.routing["workload"] == "hot_rank" and a.routing["hot_share"] == 0.6


@pytest.mark.parametrize("planner", [{"eps": 0.1}, {"moe_num_echo_experts": 6}])
def test_planner_options_that_do_not_fit_the_personality_are_bad_input(planner):
    from harness.errors import BadInput
    cfg = BackendConfig("echo", "reference", "echo", options={"planner": planner})
    with pytest.raises(BadInput, match="backends.echo.options.planner"):
        load_backend(cfg).command(_req(backend="echo"))            # ep 4: 6 is not divisible


@pytest.mark.parametrize("body,line,field", [
    ("options: {memory: {precision: int3}}", 5, "backends[0].options.memory"),
    ("options: {routing: {workload: zipf}}", 5, "backends[0].options.routing"),
    ("options: {planner: {nonsense: 1}}", 5, "backends[0].options.planner"),
    ("options: {routing: hot_rank}", 5, "backends[0].options.routing"),
])
def test_bad_reference_options_name_file_line_field(tmp_path, body, line, field):
    from harness.errors import BadInput
    from harness.runbook.load import load_runbook
    zoo = Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml"
    path = tmp_path / "rb.yaml"
    path.write_text(f"models_file: {zoo}\ncampaign: t\nmodels: [QWEN3_30B]\n"
                    "shape: {seq: 128, micro_batch: 1, global_batch: 2, ep: 2}\n"
                    f"backends:\n  - {{name: echo, kind: reference, module: echo, {body}}}\n")
    with pytest.raises(BadInput) as info:
        load_runbook(path)
    assert info.value.field == field and info.value.line in (line, line + 1), str(info.value)


def test_model_and_campaign_routing_reach_the_worker(tmp_path):
    from dataclasses import replace

    from harness.errors import BadInput
    from harness.runbook.load import load_runbook
    zoo = Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml"
    path = tmp_path / "rb.yaml"
    path.write_text(f"models_file: {zoo}\ncampaign: t\n"
                    "models: [QWEN3_30B, {name: QWEN2_57B, routing: {workload: burst}}]\n"
                    "routing: {workload: hot_rank}\n"
                    "shape: {seq: 128, micro_batch: 1, global_batch: 2, ep: 2}\n"
                    "backends:\n  - {name: echo, kind: reference, module: echo}\n")
    rb = load_runbook(path)
    assert [m.routing["workload"] for m in rb.models] == ["hot_rank", "burst"]
    backend = load_backend(rb.backends[0])
    req = replace(_req(backend="echo"), model=rb.models[1])
    argv = backend.command(req).argv
    assert argv[argv.index("--routing") + 1] == '{"workload": "burst"}'
    with pytest.raises(BadInput, match="models.QWEN2_57B.routing"):
        backend.command(replace(req, model=replace(rb.models[1], routing={"workload": "x"})))
