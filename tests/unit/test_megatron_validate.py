"""Megatron's own acceptance of the cluster commands (backends/megatron/validate.py).

Two kinds of tree:
- CI: a tiny stand-in tree (written below, under tmp_path) whose `core_transformer_config_from_args`
  builds megatron-core's real, installed `TransformerConfig` from the parsed flags, so the runner,
  the backend hook and the preflight step are exercised against real Megatron validation code;
- real Megatron-LM trees when `EPCAP_MEGATRON_TREES` names a folder of `<full commit>/` checkouts
  (docs/cluster.md "Real validation"); skipped with the reason otherwise.
Also: the fp32 router on every backend, the duplicate-flag refusal, MoonEP's TypeError as
`badflag`, and the extractor on BooleanOptionalAction.
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.megatron.args.extract import Source, extract
from backends.megatron.base import check_no_conflicts, flag_occurrences
from backends.megatron.moonep import MOONEP_FLAG_ERROR
from backends.megatron.validate import validate_commands
from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.campaign.preflight import validation_problems
from harness.errors import BadInput
from harness.results.layout import Cell
from harness.runbook.load import load_runbook
from harness.taxonomy.judge import classify
from harness.vocab import LauncherState, Status

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "golden"
TIERB = ROOT / "runbooks" / "tierb-b200-gbs8.yaml"
TREES = os.environ.get("EPCAP_MEGATRON_TREES", "")
MOONEP_RULE = "--accumulate-allreduce-grads-in-fp32"

# A stand-in for megatron/training/arguments.py: its parser knows a few flags and ignores the
# rest; the transformer config is megatron-core's own (installed), with its own __post_init__.
STAND_IN = '''
import argparse, os
from megatron.core.transformer import TransformerConfig

def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    p = argparse.ArgumentParser(allow_abbrev=False)
    for f in ("--num-layers", "--hidden-size", "--num-attention-heads", "--num-experts",
              "--moe-router-topk", "--expert-model-parallel-size"):
        p.add_argument(f, type=int)
    p.add_argument("--moe-token-dispatcher-type", default="allgather")
    p.add_argument("--moe-flex-dispatcher-backend", default="deepep")
    p.add_argument("--moe-router-dtype", default=None)
    p.add_argument("--moe-enable-deepep", action="store_true")
    if extra_args_provider is not None:
        p = extra_args_provider(p)
    args, _ = p.parse_known_args()
    args.world_size = int(os.environ["WORLD_SIZE"])
    return args

def validate_args(args, defaults={}):
    assert args.world_size % args.expert_model_parallel_size == 0, "world size vs EP"

def core_transformer_config_from_args(args):
    return TransformerConfig(
        num_layers=args.num_layers, hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads, num_moe_experts=args.num_experts,
        moe_router_topk=args.moe_router_topk,
        expert_model_parallel_size=args.expert_model_parallel_size,
        moe_token_dispatcher_type=args.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=args.moe_flex_dispatcher_backend,
        moe_router_dtype=args.moe_router_dtype, moe_enable_deepep=args.moe_enable_deepep)
'''


def stand_in_tree(root: Path) -> Path:
    """megatron/training/arguments.py only: `megatron` stays a namespace package, so
    `megatron.core` is the installed megatron-core."""
    pkg = root / "megatron" / "training"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "arguments.py").write_text(STAND_IN, encoding="utf-8")
    return root


def golden_args(name: str) -> list[str]:
    argv = json.loads((GOLDEN / name).read_text(encoding="utf-8"))["argv"]
    return argv[next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py")) + 1:]


@pytest.mark.slow
def test_runner_uses_megatron_cores_transformer_config(tmp_path):
    """Accepted as built; refused with megatron-core's own message and file:line."""
    tree = stand_in_tree(tmp_path / "tree")
    ok = golden_args("QWEN3_30B__ultraep__measure.json")
    deepep = ok + ["--moe-enable-deepep"]               # flex + hybridep: megatron-core says no
    no_experts = [a for a in ok if a not in ("--num-experts",)]
    no_experts = no_experts[:no_experts.index("--moe-router-topk") - 1] + \
        no_experts[no_experts.index("--moe-router-topk"):]
    got = validate_commands(str(tree), [("ok", ok), ("deepep", deepep), ("ep", no_experts)], 8)
    assert got[0].accepted, got[0]
    assert not got[1].accepted and got[1].stage == "core_transformer_config_from_args"
    assert got[1].message == "Only one backend is supported for flex token dispatcher."
    assert "site-packages/megatron/core/transformer/transformer_config.py:" in got[1].where
    assert not got[2].accepted and "num_moe_experts must be non None" in got[2].message
    bad_world = validate_commands(str(tree), [("w", ok)], 6)[0]
    assert (bad_world.accepted, bad_world.stage, bad_world.error) == \
        (False, "validate_args", "AssertionError")


@pytest.mark.slow
def test_preflight_refuses_what_megatron_rejects(tmp_path, monkeypatch):
    """The campaign's preflight step, through the backend hook, with the tree found by
    EPCAP_MEGATRON_TREES/<commit>: a runbook flag megatron-core rejects stops it."""
    rb = load_runbook(TIERB)
    rb = replace(rb, models=rb.models[1:2],
                 backends=tuple(b for b in rb.backends if b.name == "ultraep"))
    commit = rb.backends[0].options.megatron["commit"]
    stand_in_tree(tmp_path / commit)
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path))
    notes, problems = validation_problems(rb)
    assert problems == [] and "Megatron's own parse_args" in notes[0]
    bad = replace(rb, backends=(replace(rb.backends[0], flags=("--moe-enable-deepep",)),))
    notes, problems = validation_problems(bad)
    assert len(problems) == 4 and all("Only one backend is supported" in p for p in problems)
    assert "ultraep: QWEN3_30B/canary: Megatron rejects the command" in problems[0]
    assert "transformer_config.py:" in problems[0]
    monkeypatch.delenv("EPCAP_MEGATRON_TREES")
    notes, problems = validation_problems(bad)          # no tree: said plainly, nothing refused
    assert problems == [] and "against argument names only" in notes[0]


def test_a_tree_at_another_commit_is_not_used(tmp_path, monkeypatch):
    backend = load_backend(load_runbook(TIERB).backend("moonep"))
    monkeypatch.setattr("backends.megatron.base.git_head", lambda path: "f" * 40)
    commit = backend.source.commit
    stand_in_tree(tmp_path / commit)
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path))
    tree, why = backend.tree()
    assert tree is None and "is at ffffffffffff, not a8785b1e956e" in why


# ---- real trees ---------------------------------------------------------------------------


def real_tree(commit: str) -> Path:
    if not TREES:
        pytest.skip("EPCAP_MEGATRON_TREES is not set (a folder of <commit>/ Megatron-LM trees)")
    tree = Path(TREES) / commit
    if not (tree / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip(f"no Megatron-LM tree at {tree}")
    return tree


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["echo", "ultraep", "moonep"])
def test_every_golden_passes_its_real_tree(backend):
    """Every golden of a backend passes parse_args, validate_args and the transformer config
    of the tree the backend runs (with the fork's documented flags for UltraEP)."""
    b = load_backend(load_runbook(TIERB).backend(backend))
    tree = real_tree(b.source.commit)
    names = sorted(p.name for p in GOLDEN.glob(f"*__{backend}__*.json"))
    got = validate_commands(str(tree), [(n, golden_args(n)) for n in names], 8,
                            extra_flags=b.fork_flags())
    assert [v for v in got if not v.accepted] == [] and len(got) == 16


@pytest.mark.slow
def test_real_moonep_tree_refuses_todays_command():
    """The command before this change (no FP32 gradient accumulation) is refused by MoonEP's
    pinned tree with its own message and place, and by the adapter's static rule."""
    b = load_backend(load_runbook(TIERB).backend("moonep"))
    tree = real_tree(b.source.commit)
    args = golden_args("QWEN3_30B__moonep__time.json")
    old = [a for a in args if a != MOONEP_RULE]
    new, before = validate_commands(str(tree), [("new", args), ("old", old)], 8)
    assert new.accepted, new
    assert (before.accepted, before.stage, before.error) == (False, "validate_args", "ValueError")
    assert before.message.startswith("MoonEP requires --accumulate-allreduce-grads-in-fp32")
    assert before.where == "megatron/training/arguments.py:1087"
    assert any(MOONEP_RULE in p for p in b.preflight(["x/pretrain_gpt.py"] + old))


# ---- fp32 router, duplicate flags ---------------------------------------------------------


@pytest.mark.parametrize("backend", ["echo", "ultraep", "moonep"])
@pytest.mark.parametrize("value", ["fp64", "bf16"])
@pytest.mark.parametrize("model_gives_it", [True, False])
def test_every_backend_refuses_a_runbook_router_dtype_override(backend, value, model_gives_it,
                                                               monkeypatch):
    """QWEN2_57B's zoo entry says fp32: a runbook flag that changes it (argparse keeps the
    last value) is refused on every Megatron backend, not only UltraEP; also when it is the
    only router dtype of the command (so the duplicate-flag refusal cannot be what refuses)."""
    import backends.megatron.base as megatron
    real = megatron.model_args
    if not model_gives_it:
        def without(model):
            args = real(model)
            i = args.index("--moe-router-dtype")
            return args[:i] + args[i + 2:]
        monkeypatch.setattr(megatron, "model_args", without)
    rb = load_runbook(TIERB)
    rb = replace(rb, backends=tuple(replace(b, flags=("--moe-router-dtype", value))
                                    if b.name == backend else b for b in rb.backends))
    with pytest.raises(BadInput, match="zoo router_dtype|UltraEP command must set"):
        build(rb, "QWEN2_57B", backend, "measure")
    monkeypatch.setattr(megatron, "model_args", real)
    build(load_runbook(TIERB), "QWEN2_57B", backend, "measure")        # as filed: accepted


def build(rb, model: str, backend: str, purpose: str):
    cell = Cell(rb.campaign, model, backend, purpose, "2.00")
    return load_backend(rb.backend(backend)).command(RunRequest.for_cell(rb, cell, Path("/c")))


def test_a_repeated_flag_with_one_value_is_allowed_but_two_values_are_refused():
    check_no_conflicts(["--bf16", "--seed", "1", "--bf16", "--seed", "1"], field="f")
    with pytest.raises(BadInput, match="--seed given"):
        check_no_conflicts(["--seed", "1", "--lr", "2", "--seed=3"], field="f")


GOLDENS = sorted(p.name for p in GOLDEN.glob("*.json"))


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(GOLDENS), pick=st.integers(0, 10_000), where=st.integers(0, 10_000),
       value=st.text("abcdefxyz0123456789.", min_size=1, max_size=6))
def test_duplicate_refusal_on_mutated_goldens(name, pick, where, value):
    """Insert a copy of one of a golden's own flags anywhere (between flags): refused exactly
    when the copy's value differs from the flag's value."""
    argv = golden_args(name)
    occ = flag_occurrences(argv)
    flag = sorted(occ)[pick % len(occ)]
    original = occ[flag][0]
    starts = [i for i, a in enumerate(argv) if a.startswith("--")] + [len(argv)]
    at = starts[where % len(starts)]
    copy = [flag, value] if original else [flag]
    mutated = argv[:at] + copy + argv[at:]
    if tuple(copy[1:]) == original:
        check_no_conflicts(mutated, field="f")
    else:
        with pytest.raises(BadInput, match="appears twice"):
            check_no_conflicts(mutated, field="f")


# ---- MoonEP's failure patterns -------------------------------------------------------------

# Lines as MoonEP's pinned tree raises them (a8785b1e): arguments.py:1087 (ValueError),
# moonep_manager.py:352 (TypeError), transformer_config.py _validate_moonep (ValueError).
MOONEP_ERRORS = [
    "ValueError: MoonEP requires --accumulate-allreduce-grads-in-fp32 so master and replica "
    "gradients use the same FP32 dtype.",
    "TypeError: MoonEP requires FP32 main gradients; enable --accumulate-allreduce-grads-in-fp32.",
    "ValueError: MoonEP currently requires expert_tensor_parallel_size=1.",
    "ValueError: MoonEP does not currently support the TE operation fuser.",
    "ValueError: MoonEP supports BF16 expert weights and activations only.",
]


@pytest.mark.parametrize("line", MOONEP_ERRORS)
def test_moonep_flag_errors_are_badflag(line):
    patterns = load_backend(load_runbook(TIERB).backend("moonep")).failure_patterns()
    out = classify(1, LauncherState.FAILED, [("rank0.log", 7, "[rank0]: " + line)], patterns, 0)
    assert out.status == Status.BADFLAG, out.reason
    assert MOONEP_FLAG_ERROR in patterns[Status.BADFLAG]


# ---- the extractor on BooleanOptionalAction ------------------------------------------------


def test_extractor_reads_boolean_optional_action(tmp_path):
    (tmp_path / "megatron" / "training").mkdir(parents=True)
    (tmp_path / "megatron" / "training" / "arguments.py").write_text(textwrap.dedent("""
        import argparse
        from argparse import BooleanOptionalAction
        def add(parser):
            parser.add_argument('--rl-x', action=argparse.BooleanOptionalAction, default=False)
            parser.add_argument('--rl-y', action=BooleanOptionalAction)
            parser.add_argument('--plain', action='store_true')
    """), encoding="utf-8")
    flags, _, _ = extract(Source(str(tmp_path)))
    for f in ("--rl-x", "--no-rl-x", "--rl-y", "--no-rl-y", "--plain"):
        assert flags[f]["value"] == "none", f
    assert "--no-plain" not in flags


def test_unknown_flag_names_arguments_py():
    from backends.megatron.args import MegatronSource, check_argv, load_args
    src = MegatronSource("NVIDIA/Megatron-LM", "a8785b1e956e651796c8fcb36fdfbbdc7debe1f5")
    msg = check_argv(["--no-such-flag"], load_args(src))[0]
    assert msg.endswith("be defined in megatron/training/arguments.py)")


# ---- the doctor's Transformer Engine op-fuser line -----------------------------------------


@settings(max_examples=300, deadline=None)
@given(release=st.lists(st.integers(0, 20), min_size=1, max_size=4),
       pre=st.sampled_from(["", ".dev0", "dev3", "rc1", "a2", "b1", ".post1"]),
       local=st.sampled_from(["", "+abc123", "+cu12"]))
def test_te_version_order_is_pep440(release, pre, local):
    """The doctor compares TE versions as packaging (Megatron's is_te_min_version) does."""
    from packaging.version import Version

    from harness.health import TE_OP_FUSER_MIN, at_least
    text = ".".join(map(str, release)) + pre + local
    assert at_least(text, TE_OP_FUSER_MIN) == (Version(text) >= Version("2.14.0")), text


def test_doctor_te_op_fuser_line():
    from harness.health import te_op_fuser_line, te_version
    assert "grouped experts fuse" in te_op_fuser_line("2.14.0")
    assert "WARN transformer-engine 2.8.0 < 2.14.0" in te_op_fuser_line("2.8.0")
    assert "WARN" in te_op_fuser_line("2.14.0.dev0")
    assert "not installed here" in te_op_fuser_line(None)
    assert te_version(lambda name: "2.15.0") == "2.15.0"


@pytest.mark.slow
def test_a_tree_the_runner_cannot_import_is_a_problem_and_can_be_turned_off(tmp_path,
                                                                             monkeypatch):
    rb = load_runbook(TIERB)
    rb = replace(rb, models=rb.models[1:2],
                 backends=tuple(b for b in rb.backends if b.name == "moonep"))
    pkg = tmp_path / rb.backends[0].options.megatron["commit"] / "megatron" / "training"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "arguments.py").write_text("import no_such_module_here\n", encoding="utf-8")
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path))
    _, problems = validation_problems(rb)
    assert len(problems) == 1 and "could not run" in problems[0]
    assert "no_such_module_here" in problems[0]
    monkeypatch.setenv("EPCAP_MEGATRON_VALIDATE", "0")
    notes, problems = validation_problems(rb)
    assert problems == [] and "turned off by EPCAP_MEGATRON_VALIDATE=0" in notes[0]


# Flags the data has that a parser built here lacks, each with the condition that defines it.
CONDITIONAL = {"--kitchen-config-file": "if HAVE_KITCHEN (arguments.py)",
               "--kitchen-recipe-number": "if HAVE_KITCHEN (arguments.py)"}
COMMITS = ["a2b16b8733bb4ced46880d6adee6f19124732991", "a8785b1e956e651796c8fcb36fdfbbdc7debe1f5",
           "d98e8a64ddf34856e74b24714e3bedb2f5a39553", "e93814b4c6965c3f8639abdf690416c08937f370"]


@pytest.mark.slow
@pytest.mark.parametrize("commit", COMMITS)
def test_argument_data_equals_the_real_parser(commit):
    """The ast-extracted data (scripts/megatron_args.py) against the tree's own argparse
    parser: the same flags (bar the conditional ones) and the same value kinds."""
    from backends.megatron.args import MegatronSource, load_args
    from backends.megatron.validate import parser_flags
    tree = real_tree(commit)
    real = parser_flags(str(tree))
    ours = {f: e["value"] for f, e in
            load_args(MegatronSource("NVIDIA/Megatron-LM", commit)).flags.items()}
    assert sorted(set(real) - set(ours)) == []
    assert set(ours) - set(real) <= set(CONDITIONAL)
    assert {f: (ours[f], real[f]) for f in real if ours[f] != real[f]} == {}


@pytest.mark.slow
def test_epcap_run_exits_2_naming_backend_model_purpose_and_megatrons_message(tmp_path,
                                                                              monkeypatch):
    """`epcap run --dry-run` on a runbook whose flag megatron-core's TransformerConfig
    rejects: exit 2 before anything runs, naming backend, model, purpose, message, file:line."""
    import shutil

    import yaml
    from click.testing import CliRunner

    from harness.cli import main
    doc = yaml.safe_load(TIERB.read_text(encoding="utf-8"))
    doc["models"] = ["QWEN3_30B"]
    doc["backends"] = [b for b in doc["backends"] if b["name"] == "ultraep"]
    doc["backends"][0]["flags"] = ["--moe-enable-deepep"]
    shutil.copy(ROOT / "runbooks" / "models.yaml", tmp_path / "models.yaml")
    (tmp_path / "rb.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    stand_in_tree(tmp_path / "trees" / doc["backends"][0]["options"]["megatron"]["commit"])
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path / "trees"))
    res = CliRunner().invoke(main, ["run", str(tmp_path / "rb.yaml"), "--dry-run",
                                    "--results", str(tmp_path / "results")])
    assert res.exit_code == 2, res.output
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "ultraep: QWEN3_30B/canary: Megatron rejects the command" in text
    assert "Only one backend is supported for flex token dispatcher." in text
    assert "transformer_config.py:" in text and not (tmp_path / "results").exists()


def test_provenance_says_how_commands_are_checked(tmp_path, monkeypatch):
    """provenance.txt's `preflight.<backend>` lines: names only without a tree (the tierb
    runbook's /lustre paths), Megatron's own code with one; nothing runs to say so."""
    from harness.campaign.preflight import provenance_fields
    monkeypatch.delenv("EPCAP_MEGATRON_TREES", raising=False)
    rb = load_runbook(TIERB)
    fields = provenance_fields(rb)
    assert sorted(fields) == ["preflight.echo", "preflight.mcore-alltoall",
                              "preflight.mcore-deepep", "preflight.mcore-hybridep",
                              "preflight.moonep", "preflight.ultraep"]
    assert all(v.startswith("against argument names only") for v in fields.values())
    stand_in_tree(tmp_path / rb.backend("echo").options.megatron["commit"])
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path))
    assert provenance_fields(rb)["preflight.echo"].startswith("with Megatron's own parse_args")


# ---- the public baselines (Megatron-core's own dispatchers on main) ------------------------

BASELINES = ("mcore-alltoall", "mcore-deepep", "mcore-hybridep")


def baseline_runbook():
    rb = load_runbook(TIERB)
    return replace(rb, models=rb.models[1:2],
                   backends=tuple(b for b in rb.backends if b.name in BASELINES))


@pytest.mark.slow
def test_baseline_commands_pass_megatron_cores_own_validation(tmp_path, monkeypatch):
    """Every baseline arm's commands through the preflight step, with megatron-core's real
    TransformerConfig (the stand-in tree at main's commit); the deprecated --moe-enable-deepep
    beside flex/hybridep is refused there with megatron-core's own message (seen failing)."""
    rb = baseline_runbook()
    assert len(rb.backends) == 3
    commit = rb.backends[0].options.megatron["commit"]
    stand_in_tree(tmp_path / commit)
    monkeypatch.setenv("EPCAP_MEGATRON_TREES", str(tmp_path))
    notes, problems = validation_problems(rb)
    assert problems == [] and all("Megatron's own parse_args" in n for n in notes), notes
    hybrid = tuple(replace(b, flags=("--moe-enable-deepep",)) if b.name == "mcore-hybridep"
                   else b for b in rb.backends)
    _, problems = validation_problems(replace(rb, backends=hybrid))
    assert problems and all("Only one backend is supported" in p for p in problems)
    assert all(p.startswith("mcore-hybridep: ") for p in problems)


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_baseline_commands_pass_the_real_main_tree(name):
    """With EPCAP_MEGATRON_TREES holding main's tree: parse_args, validate_args and the
    transformer config of Megatron-LM d98e8a64 accept every baseline command."""
    rb = load_runbook(TIERB)
    b = load_backend(rb.backend(name))
    tree = real_tree(b.source.commit)
    commands = []
    for model in rb.models:
        for purpose in ("canary", "time"):
            spec = build(rb, model.name, name, purpose)
            cut = next(i for i, a in enumerate(spec.argv) if a.endswith("pretrain_gpt.py"))
            commands.append((f"{model.name}/{purpose}", spec.argv[cut + 1:]))
    got = validate_commands(str(tree), commands, 8)
    assert [v for v in got if not v.accepted] == []


def test_baseline_flags_are_mains_own():
    """The dispatcher flags and choices each baseline passes are in main's argument data."""
    from backends.megatron.args import check_argv, load_args
    from backends.megatron.baseline import DISPATCHERS, MAIN_SOURCE
    accepted = load_args(MAIN_SOURCE)
    for name, flags in DISPATCHERS.items():
        assert check_argv(flags, accepted) == [], name
    assert check_argv(["--moe-token-dispatcher-type", "moonep"], accepted)   # seen refused
