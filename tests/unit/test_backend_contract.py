"""Every backend keeps the plug-in contract (backends/README.md): a module reached through the
registry table that exposes `make_backend(config)` and `OPTIONS` (and optionally `MODULES`),
and builds a printable launch from the decisions a RunRequest carries, never from the
purpose of the run. The source rules: no module under backends/ names `Purpose`, and none
imports another module's private (`_name`) names."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.api.backend import Backend, LaunchSpec, RunRequest
from harness.api.registry import load_backend, module_name
from harness.results.layout import Cell
from harness.runbook.model import BackendConfig, ModelSpec, PhaseConfig, Shape, SlurmConfig
from harness.vocab import Purpose

ROOT = Path(__file__).resolve().parents[2]
BACKENDS_DIR = ROOT / "backends"

# One line per backend: (runbook kind, module). A new backend adds its line here.
BACKENDS = [
    ("reference", "raw"),
    ("reference", "echo"),
    ("reference", "ultraep"),
    ("reference", "moonep"),
    ("reference", "alltoall"),
    ("reference", "deepep"),
    ("reference", "hybridep"),
    ("cluster", "echo"),
    ("cluster", "ultraep"),
    ("cluster", "moonep"),
    ("cluster", "baseline"),
    ("megatron-core", "megatron_core"),
]
IDS = [f"{kind}:{module}" for kind, module in BACKENDS]

MODEL = ModelSpec(name="TINY", hf_name="x/tiny", layers=3, hidden=64, experts=16, topk=4,
                  expert_ffn=32, first_dense_layers=1, heads=4, kv_heads=4, vocab=1024,
                  arch=(("activation", ("--swiglu",)), ("normalization", ()),
                        ("position_embedding", ()), ("attention", ()), ("bias", ()),
                        ("embeddings", ()), ("ffn", ("--ffn-hidden-size", "128")),
                        ("router", ())))
# A stage the harness does not have: a backend must build its run all the same.
NEW_PURPOSE = "newstage"


def request(backend: str, purpose: str = Purpose.MEASURE, **decisions) -> RunRequest:
    """A request for one cell; `decisions` (timed, record_routing, seed, ...) override."""
    cell = Cell("contract", MODEL.name, backend, purpose, "1.50")
    req = RunRequest(cell=cell, model=MODEL, shape=Shape(seq=64, micro_batch=1, global_batch=4,
                                                         ep=4),
                     backend=BackendConfig(backend, "?", "?"),
                     phase=PhaseConfig(warmup=1, iters=2, trials=3), pad_multiple=128,
                     seed=7, cell_dir=Path("/results/cells/one"),
                     paths={"megatron": "/opt/Megatron-LM"},
                     slurm=SlurmConfig(nodes=1, gpus_per_node=4), model_seed=5)
    return replace(req, **decisions)


def spec_dict(spec: LaunchSpec) -> dict:
    return dataclasses.asdict(spec)


@pytest.mark.parametrize("kind,module", BACKENDS, ids=IDS)
def test_module_exposes_the_plugin_contract(kind, module):
    mod = importlib.import_module(module_name(kind, module))
    assert callable(mod.make_backend)
    assert dataclasses.is_dataclass(mod.OPTIONS) and isinstance(mod.OPTIONS, type)
    known = getattr(mod, "MODULES", None)
    assert known is None or module in known
    backend = load_backend(BackendConfig(module, kind, module))
    assert isinstance(backend, Backend) and isinstance(backend.options, mod.OPTIONS)


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("record_routing", [False, True])
@pytest.mark.parametrize("kind,module", BACKENDS, ids=IDS)
def test_command_is_built_from_the_decisions(kind, module, timed, record_routing):
    backend = load_backend(BackendConfig(module, kind, module))
    req = request(module, timed=timed, record_routing=record_routing)
    spec = backend.command(req)
    assert isinstance(spec, LaunchSpec) and spec.argv and spec.ntasks >= 1
    assert all(isinstance(a, str) for a in spec.argv)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
    assert req.iterations == 1 + 2 * (3 if timed else 1)
    shape = backend.expected_log_shape(req)
    assert shape.get("expected_iters", req.iterations) == req.iterations


@pytest.mark.parametrize("kind,module", BACKENDS, ids=IDS)
def test_a_new_purpose_needs_no_backend_edit(kind, module):
    """The same decisions under an unknown purpose give the same launch (the purpose is
    only a label: the cell name, EPCAP_PURPOSE)."""
    backend = load_backend(BackendConfig(module, kind, module))
    for timed, record in ((False, False), (True, False), (False, True)):
        known = backend.command(request(module, Purpose.MEASURE, timed=timed,
                                        record_routing=record))
        new = backend.command(request(module, NEW_PURPOSE, timed=timed, record_routing=record))
        assert json.dumps(spec_dict(new)).replace(NEW_PURPOSE, Purpose.MEASURE) == \
            json.dumps(spec_dict(known))


@pytest.mark.parametrize("purpose,timed,record", [
    (Purpose.CANARY, False, False), (Purpose.MEASURE, False, True),
    (Purpose.VALIDATE, False, False), (Purpose.TIME, True, False)])
def test_for_cell_takes_the_decisions_of_a_purpose(purpose, timed, record):
    from harness.runbook.load import load_runbook

    rb = load_runbook(ROOT / "runbooks" / "tierb-b200-gbs8.yaml")
    req = RunRequest.for_cell(rb, Cell(rb.campaign, "QWEN3_30B", "echo", purpose, "2.00"),
                              Path("/c"))
    assert (req.timed, req.record_routing) == (timed, record)
    assert req.seed == (rb.validate.seed if purpose == Purpose.VALIDATE else rb.seed)
    assert req.model_seed == rb.seed


def backend_sources() -> list[Path]:
    return sorted(p for p in BACKENDS_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def dotted(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported_from(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom in `path` reads."""
    if not node.level:
        return node.module or ""
    package = dotted(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def test_every_backend_module_is_listed():
    """A module under backends/ that defines make_backend has its line in BACKENDS."""
    listed = {module_name(kind, module) for kind, module in BACKENDS}
    for path in backend_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == "make_backend" for n in tree.body):
            assert dotted(path) in listed, f"{dotted(path)}: add its line to BACKENDS"


def test_no_backend_module_names_purpose():
    bad = []
    for path in backend_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.ImportFrom)
                     else [node.id] if isinstance(node, ast.Name)
                     else [node.attr] if isinstance(node, ast.Attribute) else [])
            if "Purpose" in names:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"backends branch on decisions, not purposes: {bad}"


def test_no_private_name_crosses_a_module_boundary():
    bad = []
    for path in backend_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__")]
                if private and imported_from(path, node) != dotted(path):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {private}")
    assert not bad, bad
