"""The loader's shape checks (docs/runbook.md#shape-checks): shapes the backends reject at
iteration 0 are refused at load with file:line: field and exit 2, before any directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import BadInput
from harness.runbook.load import load_runbook

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "runbooks" / "models.yaml"
TIERB = (ROOT / "runbooks" / "tierb-b200-gbs8.yaml").read_text()


def reference_book(tmp_path: Path, *, ep=2, gbs=2, mbs=1, model="QWEN3_30B",
                   extra_model="") -> Path:
    path = tmp_path / "rb.yaml"
    path.write_text(f"models_file: {ZOO}\ncampaign: t\nmodels: [{model}]\n{extra_model}"
                    f"shape: {{seq: 128, micro_batch: {mbs}, global_batch: {gbs}, ep: {ep}}}\n"
                    "backends:\n  - {name: echo, kind: reference, module: echo}\n")
    return path


def tierb_book(tmp_path: Path, **subs: str) -> Path:
    text = TIERB
    for old, new in subs.items():
        assert old in text
        text = text.replace(old, new)
    (tmp_path / "models.yaml").write_text(ZOO.read_text())
    path = tmp_path / "tierb.yaml"
    path.write_text(text)
    return path


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def refused(path: Path) -> BadInput:
    with pytest.raises(BadInput) as err:
        load_runbook(path)
    assert err.value.exit_code == 2 and err.value.path == str(path)
    return err.value


def test_ep_that_does_not_divide_experts(tmp_path):
    """The issue's case: ep 3 with 64 experts planned, then every canary crashed."""
    path = reference_book(tmp_path, ep=3, gbs=3, model="DEEPSEEK_V2_LITE")
    err = refused(path)
    assert err.field == "shape.ep" and err.line == line_of(path, "shape:")
    assert "ep 3 does not divide DEEPSEEK_V2_LITE's 64 experts" in str(err)


def test_global_batch_not_multiple_of_micro_batch(tmp_path):
    err = refused(reference_book(tmp_path, gbs=3, mbs=2))
    assert err.field == "shape.global_batch" and "micro_batch 2" in str(err)


def test_global_batch_not_multiple_of_data_parallel(tmp_path):
    err = refused(reference_book(tmp_path, ep=4, gbs=2))
    assert err.field == "shape.global_batch" and "1 x 4" in str(err)


def test_cluster_world_not_multiple_of_ep(tmp_path):
    path = tierb_book(tmp_path, **{"gpus_per_node: 8": "gpus_per_node: 6",
                                   "global_batch: 8": "global_batch: 48"})
    err = refused(path)
    assert err.field == "shape.ep" and "world size 6 (slurm.gpus_per_node)" in str(err)


def test_cluster_global_batch_vs_world(tmp_path):
    path = tierb_book(tmp_path, **{"nodes: 1": "nodes: 2"})
    err = refused(path)
    assert err.field == "shape.global_batch" and "1 x 16" in str(err)
    assert err.line == line_of(path, "shape:")


def test_cluster_without_gpus(tmp_path):
    err = refused(tierb_book(tmp_path, **{"gpus_per_node: 8": "gpus_per_node: 0"}))
    assert err.field == "slurm.gpus_per_node"


def test_topk_over_experts_names_the_override(tmp_path):
    path = reference_book(tmp_path, model="{name: QWEN3_30B, topk: 200}")
    err = refused(path)
    assert "top-k 200 exceeds experts 128" in str(err)


def test_cli_exits_2_before_any_directory(tmp_path):
    path = reference_book(tmp_path, ep=3, gbs=3, model="DEEPSEEK_V2_LITE")
    results = tmp_path / "results"
    out = CliRunner().invoke(main, ["run", str(path), "--results", str(results)])
    assert out.exit_code == 2 and f"{path}:" in out.output and "shape.ep" in out.output
    assert not results.exists()


@settings(max_examples=60, deadline=None)
@given(ep=st.integers(1, 12), gbs=st.integers(1, 48), mbs=st.integers(1, 4),
       model=st.sampled_from(["QWEN3_30B", "DEEPSEEK_V2_LITE", "QWEN2_57B"]))
def test_loader_agrees_with_the_backends_rules(tmp_path_factory, ep, gbs, mbs, model):
    """Generated shapes: the loader accepts exactly those the upstream rules accept (experts
    % ep; global batch % (micro batch x data parallel), data parallel = ep ranks here)."""
    experts = {"QWEN3_30B": 128, "DEEPSEEK_V2_LITE": 64, "QWEN2_57B": 64}[model]
    path = reference_book(tmp_path_factory.mktemp("s"), ep=ep, gbs=gbs, mbs=mbs, model=model)
    upstream_ok = experts % ep == 0 and gbs % mbs == 0 and gbs % (mbs * ep) == 0
    try:
        load_runbook(path)
        loaded = True
    except BadInput as exc:
        loaded = False
        assert exc.line is not None and exc.field and exc.exit_code == 2
        assert exc.field.startswith("shape.")
    assert loaded == upstream_ok
