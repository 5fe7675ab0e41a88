"""A model's architecture flags are the model's (docs/runbook.md#architecture).

Each zoo model's generated Megatron-LM command is held to the model's own public config.json
(tests/fixtures/hf_configs/<MODEL>.json, each naming its source): the flags expected are
derived HERE from the config, by the rules below, never read from the zoo. A model a cluster
backend runs that states no architecture, or only part of it, is refused at load naming the
models file, the entry's line and the fields to give; the dry run says where each flag came
from.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.api.backend import RunRequest
from harness.api.registry import CLUSTER_KIND, load_backend
from harness.cli import main
from harness.errors import BadInput
from harness.results.layout import Cell
from harness.runbook.load import load_runbook
from harness.runbook.model import ARCH_FIELDS

ROOT = Path(__file__).resolve().parents[2]
TIERB = ROOT / "runbooks" / "tierb-b200-gbs8.yaml"
ZOO = ROOT / "runbooks" / "models.yaml"
CONFIGS = ROOT / "tests" / "fixtures" / "hf_configs"
MODELS = ("QWEN2_57B", "QWEN3_30B", "QWEN3_235B", "DEEPSEEK_V2_LITE")

# Every Megatron-LM flag that says what the model IS (architecture and sizes), whether or not
# any zoo model uses it: a command carrying one the config does not imply is wrong too (the
# `--swiglu` a gelu model would inherit, a `--add-bias-linear`, a window size).
MODEL_FLAGS = frozenset({
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--group-query-attention", "--num-query-groups", "--kv-channels", "--vocab-size",
    "--swiglu", "--squared-relu", "--normalization", "--norm-epsilon", "--apply-layernorm-1p",
    "--position-embedding-type", "--use-rotary-position-embeddings", "--no-position-embedding",
    "--rotary-base", "--rotary-percent", "--rotary-interleaved", "--rope-type",
    "--rotary-scaling-factor", "--mscale", "--mscale-all-dim", "--rotary-seq-len-interpolation-factor",
    "--disable-bias-linear", "--add-bias-linear", "--add-qkv-bias", "--qk-layernorm",
    "--untie-embeddings-and-output-weights", "--multi-latent-attention", "--q-lora-rank",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
    "--window-size", "--window-attn-skip-freq", "--softmax-type",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq",
    "--moe-shared-expert-intermediate-size", "--moe-shared-expert-gate",
    "--moe-router-score-function", "--moe-router-pre-softmax", "--moe-router-topk-scaling-factor",
    "--moe-router-enable-expert-bias", "--moe-router-num-groups", "--moe-router-group-topk",
})


def config(model: str) -> dict:
    return json.loads((CONFIGS / f"{model}.json").read_text(encoding="utf-8"))


def expected_flags(cfg: dict) -> dict[str, tuple]:
    """The Megatron-LM flags a Hugging Face config implies, {flag: values}, by rules of the
    three model types (transformers' modeling files: qwen2_moe, qwen3_moe, deepseek_v2)."""
    kind = cfg["model_type"]
    assert kind in ("qwen2_moe", "qwen3_moe", "deepseek_v2"), kind
    assert cfg["hidden_act"] == "silu"          # gate/up/down MLP with SiLU: SwiGLU
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    layers, dense = cfg["num_hidden_layers"], cfg.get("first_k_dense_replace", 0)
    out: dict[str, tuple] = {
        "--num-layers": (layers,), "--hidden-size": (cfg["hidden_size"],),
        "--num-attention-heads": (heads,), "--vocab-size": (cfg["vocab_size"],),
        "--ffn-hidden-size": (cfg["intermediate_size"],), "--swiglu": (),
        "--normalization": ("RMSNorm",), "--norm-epsilon": (cfg["rms_norm_eps"],),
        "--position-embedding-type": ("rope",), "--rotary-base": (cfg["rope_theta"],),
        "--disable-bias-linear": (),                # no bias on the MLP or output projections
        "--num-experts": (cfg.get("num_experts") or cfg["n_routed_experts"],),
        "--moe-router-topk": (cfg["num_experts_per_tok"],),
        "--moe-ffn-hidden-size": (cfg["moe_intermediate_size"],),
        "--moe-router-score-function": (cfg.get("scoring_func", "softmax"),),
    }
    if not cfg["tie_word_embeddings"]:
        out["--untie-embeddings-and-output-weights"] = ()
    if not cfg["norm_topk_prob"]:                  # softmax over all experts, not renormalised
        out["--moe-router-pre-softmax"] = ()
    shared = cfg.get("shared_expert_intermediate_size") or \
        cfg.get("n_shared_experts", 0) * cfg["moe_intermediate_size"]
    if shared:
        out["--moe-shared-expert-intermediate-size"] = (shared,)
    if dense:
        out["--moe-layer-freq"] = ([0] * dense + [1] * (layers - dense),)
    if kind == "deepseek_v2":                      # MLA: latent KV, its own head sizes
        assert cfg["q_lora_rank"] is None          # Lite: queries not compressed (no flag)
        out.update({"--multi-latent-attention": (), "--kv-lora-rank": (cfg["kv_lora_rank"],),
                    "--qk-head-dim": (cfg["qk_nope_head_dim"],),
                    "--qk-pos-emb-head-dim": (cfg["qk_rope_head_dim"],),
                    "--v-head-dim": (cfg["v_head_dim"],),
                    "--qk-layernorm": (),           # kv_a_layernorm on the latent
                    "--moe-router-topk-scaling-factor": (cfg["routed_scaling_factor"],)})
        rope = cfg["rope_scaling"]
        assert rope["type"] == "yarn"
        out.update({"--rope-type": ("yarn",), "--rotary-scaling-factor": (rope["factor"],),
                    "--mscale": (rope["mscale"],), "--mscale-all-dim": (rope["mscale_all_dim"],)})
        return out
    out["--kv-channels"] = (cfg.get("head_dim") or cfg["hidden_size"] // heads,)
    if kv < heads:
        out.update({"--group-query-attention": (), "--num-query-groups": (kv,)})
    if kind == "qwen2_moe":
        out["--add-qkv-bias"] = ()                 # Qwen2MoeAttention: q/k/v with bias
        out["--moe-shared-expert-gate"] = ()       # Qwen2MoeSparseMoeBlock.shared_expert_gate
    else:
        assert not cfg["attention_bias"]
        out["--qk-layernorm"] = ()                 # Qwen3MoeAttention q_norm / k_norm
    return out


def command_flags(argv: list[str]) -> dict[str, tuple]:
    """{flag: values} of the model-describing flags of an argv (each given once)."""
    out: dict[str, tuple] = {}
    i = 0
    while i < len(argv):
        tok, i = argv[i], i + 1
        if tok not in MODEL_FLAGS:
            continue
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        assert tok not in out, f"{tok} given twice"
        out[tok] = tuple(values)
    return out


def same(want: tuple, got: tuple) -> bool:
    """Values equal as the numbers (or strings, or the layer pattern) they stand for."""
    if len(want) != len(got):
        return False
    for w, g in zip(want, got, strict=True):
        if isinstance(w, list):
            m = re.fullmatch(r"\(\[0\]\*(\d+)\+\[1\]\*(\d+)\)", g)
            if m is None or [0] * int(m[1]) + [1] * int(m[2]) != w:
                return False
        elif isinstance(w, (int, float)):
            if float(g) != float(w):
                return False
        elif g != w:
            return False
    return True


@pytest.fixture(scope="module")
def tierb():
    return load_runbook(TIERB)


CLUSTER = ("echo", "ultraep", "moonep", "mcore-alltoall", "mcore-deepep", "mcore-hybridep")


@pytest.mark.parametrize("backend", CLUSTER)
@pytest.mark.parametrize("model", MODELS)
def test_command_carries_exactly_the_models_flags(tierb, model, backend):
    """Each Tier B command of each zoo model carries exactly the model-describing flags its
    public config implies: none missing, none extra, every value equal."""
    assert tierb.backend(backend).kind == CLUSTER_KIND
    cell = Cell(tierb.campaign, model, backend, "measure", "2.00")
    spec = load_backend(tierb.backend(backend)).command(
        RunRequest.for_cell(tierb, cell, Path("/results/cells") / cell.name))
    got, want = command_flags(spec.argv), expected_flags(config(model))
    assert sorted(got) == sorted(want), (sorted(set(got) ^ set(want)), config(model)["_source"])
    wrong = {f: (want[f], got[f]) for f in want if not same(want[f], got[f])}
    assert not wrong, wrong


def test_each_fixture_names_its_public_source():
    """The configs the expectations come from say where they were copied from, and the zoo
    names the same source for each model."""
    zoo = yaml.safe_load(ZOO.read_text(encoding="utf-8"))["models"]
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(MODELS) == sorted(zoo)
    for model in MODELS:
        source = config(model)["_source"]
        assert re.search(r"@[0-9a-f]{40}:|^https://huggingface\.co/[^/]+/[^/]+/blob/[0-9a-f]{40}/",
                         source), source             # a commit or a Hub revision, pinned
        assert source.split(" ")[0] in zoo[model]["arch_source"]
        assert config(model)["_model"] == zoo[model]["hf_name"]


def runbook_with(tmp_path: Path, entry: dict, backend_kind: str = CLUSTER_KIND) -> Path:
    """A runbook in `tmp_path` running one new model (`entry`, appended to a copy of the
    shipped zoo): Tier B's with its cluster backends, or a minimal reference one."""
    body = "".join(f"    {ln}\n" for ln in yaml.safe_dump(entry, sort_keys=False).splitlines())
    (tmp_path / "models.yaml").write_text(ZOO.read_text(encoding="utf-8").rstrip("\n")
                                          + "\n  NEW_MOE:\n" + body, encoding="utf-8")
    if backend_kind == CLUSTER_KIND:
        text = TIERB.read_text(encoding="utf-8").replace(
            "models: [QWEN2_57B, QWEN3_30B, QWEN3_235B, DEEPSEEK_V2_LITE]", "models: [NEW_MOE]")
    else:
        text = ("campaign: ref\nmodels: [NEW_MOE]\n"
                "shape: {seq: 512, micro_batch: 1, global_batch: 8, ep: 4}\n"
                f"backends: [{{name: echo, kind: {backend_kind}, module: echo}}]\n")
    (tmp_path / "rb.yaml").write_text(text, encoding="utf-8")
    return tmp_path / "rb.yaml"


# gpt-oss-120b's numbers (the issue's example of a new architecture), without its flags
GPT_OSS = {"hf_name": "openai/gpt-oss-120b", "layers": 36, "hidden": 2880, "experts": 128,
           "topk": 4, "expert_ffn": 2880, "heads": 64, "kv_heads": 8, "vocab": 201088,
           "router_dtype": "fp32", "routing_sigma": 0.1}
ZOO_ARCH = yaml.safe_load(ZOO.read_text(encoding="utf-8"))["models"]["QWEN3_30B"]["arch"]


def entry_line(models_file: Path) -> int:
    return next(i for i, ln in enumerate(models_file.read_text().splitlines(), 1)
                if ln.strip() == "NEW_MOE:")


def test_a_new_model_without_architecture_is_refused_at_load(tmp_path):
    """The issue's case: gpt-oss added with its numbers only. Refused at load (exit 2 from
    the CLI) naming the models file, the entry's line and every field to give."""
    rb = runbook_with(tmp_path, GPT_OSS)
    with pytest.raises(BadInput) as err:
        load_runbook(rb)
    msg = str(err.value)
    assert f"{tmp_path / 'models.yaml'}:{entry_line(tmp_path / 'models.yaml')}" in msg
    assert "NEW_MOE states no architecture" in msg
    assert "give arch: {" + ", ".join(ARCH_FIELDS) + "}" in msg and "arch_source" in msg
    out = CliRunner().invoke(main, ["run", str(rb), "--dry-run", "--no-test-only",
                                    "--results", str(tmp_path / "results")])
    assert out.exit_code == 2, out.output
    assert "NEW_MOE states no architecture" in out.output
    assert not (tmp_path / "results").exists()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kept=st.lists(st.sampled_from(ARCH_FIELDS), unique=True, max_size=len(ARCH_FIELDS) - 1))
def test_any_missing_aspect_is_named(tmp_path_factory, kept):
    """Whatever strict subset of the aspects a model states, the refusal names exactly the
    missing ones, in order, at the entry's line."""
    tmp = tmp_path_factory.mktemp("arch")
    rb = runbook_with(tmp, {**GPT_OSS, "arch": {a: ZOO_ARCH[a] for a in kept}} if kept
                      else GPT_OSS)
    with pytest.raises(BadInput) as err:
        load_runbook(rb)
    missing = [a for a in ARCH_FIELDS if a not in kept]
    msg = str(err.value)
    assert "give arch: {" + ", ".join(missing) + "}" in msg, msg
    assert f"models.yaml:{entry_line(tmp / 'models.yaml')}" in msg


# (control characters are refused for the whole file before any field: test_boundary_inputs)
PRINTABLE = st.characters(blacklist_categories=("Cc", "Cs"))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(aspect=st.sampled_from(ARCH_FIELDS),
       bad=st.one_of(st.none(), st.integers(), st.text(PRINTABLE, max_size=8),
                     st.lists(st.text(PRINTABLE, max_size=6).filter(
                         lambda t: not t.startswith("--")), min_size=1, max_size=3),
                     st.dictionaries(st.text(PRINTABLE, max_size=4), st.integers(),
                                     max_size=2)))
def test_a_malformed_aspect_is_refused_at_its_line(tmp_path_factory, aspect, bad):
    """An aspect that is not a list of flags (null, a number, a string, a list starting
    with a value, a mapping) is refused naming that aspect."""
    tmp = tmp_path_factory.mktemp("arch")
    rb = runbook_with(tmp, {**GPT_OSS, "arch": {**ZOO_ARCH, aspect: bad}})
    with pytest.raises(BadInput) as err:
        load_runbook(rb)
    assert f"models.NEW_MOE.arch.{aspect}" in str(err.value), str(err.value)


def test_a_complete_architecture_is_accepted_and_a_reference_runbook_needs_none(tmp_path):
    """With every aspect stated the model loads and its command carries them; a runbook whose
    backends build no model command (reference) loads a model stating none."""
    rb = load_runbook(runbook_with(tmp_path, {**GPT_OSS, "arch": ZOO_ARCH}))
    assert dict(rb.model("NEW_MOE").arch) == {a: tuple(v) for a, v in ZOO_ARCH.items()}
    ref = tmp_path / "ref"
    ref.mkdir()
    assert load_runbook(runbook_with(ref, GPT_OSS, "reference")).model("NEW_MOE").arch == ()


def test_dry_run_says_where_each_flag_came_from(tmp_path):
    """Per model: each aspect's flags with the zoo file:line (or the runbook's) they were
    written at, the public config they were copied from, and what each backend adds."""
    rb = tmp_path / "rb.yaml"
    rb.write_text(TIERB.read_text(encoding="utf-8").replace(
        "models: [QWEN2_57B, QWEN3_30B, QWEN3_235B, DEEPSEEK_V2_LITE]",
        "models: [QWEN3_30B, {name: DEEPSEEK_V2_LITE, arch: {ffn: [--ffn-hidden-size, '10944']}}]")
        .replace("models_file: models.yaml", f"models_file: {ZOO}"), encoding="utf-8")
    out = CliRunner().invoke(main, ["run", str(rb), "--dry-run", "--no-test-only", "--until",
                                    "preflight", "--results", str(tmp_path / "results")])
    assert out.exit_code == 0, out.output
    text = out.output
    zoo = ZOO.read_text(encoding="utf-8").splitlines()
    q30 = next(i for i, ln in enumerate(zoo, 1) if ln.strip() == "QWEN3_30B:")
    norm = next(i for i, ln in enumerate(zoo, 1) if i > q30 and "normalization:" in ln)
    assert "model QWEN3_30B: flags and where each comes from" in text
    assert (f"  arch.normalization: --normalization RMSNorm --norm-epsilon 1e-6  "
            f"[zoo {ZOO}:{norm}]") in text
    mine = next(i for i, ln in enumerate(rb.read_text().splitlines(), 1)
                if ln.startswith("models: [QWEN3_30B"))
    assert f"  arch.ffn: --ffn-hidden-size 10944  [runbook {rb}:{mine}]" in text
    assert f"  arch.ffn: --ffn-hidden-size 6144  [zoo {ZOO}:" in text
    assert "arch copied from the model's config: ai-dynamo/aiconfigurator@095f58a5" in text
    assert "(harness default (backends.megatron.base.common_args)): --transformer-impl" in text
    assert text.count("flags and where each comes from") == 2


def test_a_model_built_in_code_without_architecture_gets_no_command(tierb):
    """The command builder refuses a model stating no architecture (one made in code, past
    the loader), rather than give it another model's flags."""
    cell = Cell(tierb.campaign, "QWEN3_30B", "echo", "measure", "2.00")
    req = RunRequest.for_cell(tierb, cell, Path("/results/cells") / cell.name)
    req = replace(req, model=replace(req.model, arch=()))
    with pytest.raises(BadInput, match="model QWEN3_30B states no architecture flags"):
        load_backend(tierb.backend("echo")).command(req)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dense=st.integers(1, 65536), ffn=st.integers(1, 65536), leading=st.integers(0, 3))
@example(dense=10944, ffn=10944, leading=1).via("DeepSeek-V2-Lite")
@example(dense=10944, ffn=1408, leading=1).via("the expert size given as the dense one")
def test_the_dense_ffn_is_one_number(tmp_path_factory, dense, ffn, leading):
    """With leading dense layers, arch.ffn's --ffn-hidden-size and dense_ffn are the same
    config number (intermediate_size): a model a cluster backend runs giving two is refused
    at arch.ffn. A reference runbook (no command) may shrink dense_ffn alone (CPU sizes)."""
    tmp = tmp_path_factory.mktemp("ffn")
    arch = {**ZOO_ARCH, "ffn": ["--ffn-hidden-size", str(ffn)]}
    rb = runbook_with(tmp, {**GPT_OSS, "first_dense_layers": leading, "dense_ffn": dense,
                            "arch": arch})
    if leading and dense != ffn:
        with pytest.raises(BadInput, match=f"--ffn-hidden-size {ffn} is not dense_ffn {dense}"
                           ) as err:
            load_runbook(rb)
        assert "models.NEW_MOE.arch.ffn" in str(err.value)
    else:
        assert load_runbook(rb).model("NEW_MOE").dense_ffn == dense
    (tmp / "ref").mkdir()
    ref = runbook_with(tmp / "ref", {**GPT_OSS, "first_dense_layers": leading,
                                     "dense_ffn": dense, "arch": arch}, "reference")
    assert load_runbook(ref).model("NEW_MOE").dense_ffn == dense
