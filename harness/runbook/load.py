"""Load and validate a YAML runbook into its typed model (harness/runbook/model.py).

Every error names file, line and field (over harness.io.yamldoc); see docs/runbook.md.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from harness.api.registry import (
    BACKEND_KINDS,
    CLUSTER_KIND,
    LAUNCHER_NAMES,
    module_name,
    module_problem,
    options_type,
)
from harness.errors import BadInput
from harness.grid.capacity import Grid
from harness.grid.heldout import parse_target, resolve_validate
from harness.io import bounds
from harness.io.boundary.paths import resolve_against, special_file_problem
from harness.io.yamldoc import Doc as _Doc
from harness.io.yamldoc import check_type as _check_type
from harness.io.yamldoc import fields_from as _fields_from
from harness.io.yamldoc import mapping as _mapping
from harness.io.yamldoc import read_doc as _read_doc
from harness.io.yamldoc import require as _require
from harness.io.yamldoc import shown as _shown
from harness.runbook.checks import (
    canonical_capacity,
    check_capacities,
    check_model,
    check_shape,
    check_timing,
    held_out_field,
)
from harness.runbook.model import (
    ALLOCATIONS,
    ARCH_FIELDS,
    CONTAINER_ENGINES,
    UNCLASSIFIED_ACTIONS,
    BackendConfig,
    CapacityConfig,
    ContainerConfig,
    Limits,
    ModelSpec,
    PhaseConfig,
    PublishConfig,
    Runbook,
    Shape,
    SlurmConfig,
    TimingConfig,
    UnclassifiedPolicy,
)
from harness.runbook.zoo import read_zoo

# ---------------------------------------------------------------------------------------------
# Loading and validation (docs/runbook.md). Every error names file, line and field.
# ---------------------------------------------------------------------------------------------


TOP_KEYS = ("campaign", "models_file", "models", "shape", "backends", "capacity", "measure",
            "validate", "timing", "limits", "launcher", "device_memory_gb", "seed",
            "repositories", "paths", "slurm", "cell_wall_hours", "gpu_hours_per_cell",
            "max_parallel_cells",
            "routing", "container", "publish", "frontier", "ladder")
# `frontier: {rungs: k}` (docs/frontier.md): k executable rungs each side of a selection;
# each rung is one more timed launch per pair, so k stays small
DEFAULT_FRONTIER_RUNGS, MAX_FRONTIER_RUNGS = 2, 8
# `ladder: {routing_sigma: [...]}` (docs/ladder.md): each step is a whole campaign
MAX_LADDER_STEPS = 8
# `paths` keys some code reads (backends/megatron/base.py: megatron, data, tokenizer); any
# other key is an error, so a path nothing reads cannot look configured.
PATH_KEYS = ("megatron", "data", "tokenizer")
REQUIRED_TOP = ("campaign", "models", "shape", "backends")


DEPRECATED_HOURS_KEY = "gpu_hours_per_cell"   # held wall-clock hours: renamed cell_wall_hours


DEFAULT_RUNBOOK = "runbooks/local-cpu.yaml"     # what `epcap run` reads without a RUNBOOK


def default_runbook() -> Path:
    """runbooks/local-cpu.yaml here, else the one shipped next to the harness package."""
    here = Path(DEFAULT_RUNBOOK)
    return here if here.is_file() else Path(__file__).resolve().parents[2] / DEFAULT_RUNBOOK


def cell_wall_hours(doc: _Doc, data: dict) -> float | None:
    """`cell_wall_hours` (the wall-clock hours one cell holds its allocation); the old key
    `gpu_hours_per_cell`, which held the same wall-clock hours under a GPU-hours name, is
    read as it with a deprecation line on stderr; both at once is an error."""
    new, old = data.get("cell_wall_hours"), data.get(DEPRECATED_HOURS_KEY)
    if new is not None and old is not None:
        raise doc.error((DEPRECATED_HOURS_KEY,), "deprecated name of cell_wall_hours; give "
                        "only cell_wall_hours")
    if old is not None:
        hours = _check_type(doc, old, float, (DEPRECATED_HOURS_KEY,))    # bad input first
        print(f"epcap: {doc.path}: {DEPRECATED_HOURS_KEY} is deprecated (it holds wall-clock "
              "hours per cell, not GPU-hours): rename it cell_wall_hours", file=sys.stderr)
        return hours
    return None if new is None else _check_type(doc, new, float, ("cell_wall_hours",))


ARCH_KEYS = ("arch", "arch_source")   # a model's architecture keys, read here (not typed)
FFN_FLAG = "--ffn-hidden-size"         # arch.ffn's flag: the dense layers' FFN size


def _arch(doc: _Doc, value: object, where: tuple) -> dict[str, tuple[str, ...]]:
    """A model's `arch:` mapping: aspects of ARCH_FIELDS only, each a list of Megatron-LM
    flags and their values that starts with a `--flag` ([] states Megatron's default)."""
    raw = _mapping(doc, value, where, ARCH_FIELDS)
    if value is None:
        raise doc.error(where, f"is empty: give {', '.join(ARCH_FIELDS)}")
    out = {}
    for aspect, flags in raw.items():
        items = _check_type(doc, flags, tuple[str, ...], where + (aspect,))
        if items and not items[0].startswith("--"):
            raise doc.error(where + (aspect,), f"must start with a --flag, got "
                            f"{_shown(doc, items[0])}")
        out[aspect] = items
    return out


def _arch_source(doc: _Doc, entry: dict, where: tuple) -> str | None:
    """`arch_source`: the public config the architecture was copied from (a string)."""
    value = entry.get("arch_source")
    return None if value is None else _check_type(doc, value, str, where + ("arch_source",))


def _at(doc: _Doc, where: tuple, label: str) -> str:
    """`<label> <file>:<line>` of a written field, for the dry run's origins."""
    return f"{label} {doc.path}:{doc.lines.get(where, '?')}"


def arch_problem(name: str, arch: dict) -> str | None:
    """Why a model's architecture is not stated in full (None when it is): the aspects to
    give, each a list of Megatron-LM flags (docs/runbook.md#architecture)."""
    missing = [a for a in ARCH_FIELDS if a not in arch]
    if not missing:
        return None
    what = "states no architecture" if not arch else "leaves architecture fields out"
    return (f"model {name} {what}: give arch: {{{', '.join(missing)}}}, each a list of "
            "Megatron-LM flags as the model's public config.json implies them ([] states "
            "Megatron's default), and arch_source: the config they come from (URL at a "
            "revision, or repository@commit:path); see docs/runbook.md#architecture")


def dense_ffn_problem(spec: ModelSpec) -> str | None:
    """Why the model's `--ffn-hidden-size` (arch.ffn) is not its `dense_ffn` when it has
    leading dense layers (both are the config's intermediate_size), or None."""
    ffn = dict(spec.arch).get("ffn", ())
    if not spec.first_dense_layers or FFN_FLAG not in ffn:
        return None
    i = ffn.index(FFN_FLAG)
    given = ffn[i + 1] if i + 1 < len(ffn) else None
    if given == str(spec.dense_ffn):
        return None
    return (f"{FFN_FLAG} {given} is not dense_ffn {spec.dense_ffn}, the FFN of its "
            f"{spec.first_dense_layers} leading dense layer(s): both are the config's "
            "intermediate_size")


def _models(doc: _Doc, data: dict, base: Path, needs_arch: bool
            ) -> tuple[tuple[ModelSpec, ...], dict[str, tuple[tuple[str, str], ...]]]:
    """The runbook's models (zoo entries plus overrides) and where each one's flag groups
    were written. With `needs_arch` (a backend builds the model's Megatron-LM command) a
    model that does not state its whole architecture is refused at its zoo entry."""
    zoo_rel = data.get("models_file", "models.yaml")
    if not isinstance(zoo_rel, str):
        raise doc.error(("models_file",), f"must be a path string, got {zoo_rel!r}")
    models_file = read_zoo(base / zoo_rel, "models_file")
    zoo_doc, zoo = models_file.doc, models_file.models
    entries = data["models"]
    if not isinstance(entries, list) or not entries:
        raise doc.error(("models",), "must be a non-empty list of model names or {name: ...}")
    out: list[ModelSpec] = []
    origins: dict[str, tuple[tuple[str, str], ...]] = {}
    for i, entry in enumerate(entries):
        where = ("models", i)
        overrides: dict = {}
        if isinstance(entry, dict):
            if "name" not in entry:
                raise doc.error(where, "missing required key 'name'")
            name = entry["name"]
            overrides = _fields_from(doc, ModelSpec, _typed(entry), where, skip=("arch",))
            overrides.pop("name", None)
        else:
            name = entry
        if not isinstance(name, str):
            raise doc.error(where, f"must be a model name, got {name!r}")
        why = bounds.path_component_problem(name, "model")   # before any directory is written
        if why is not None:
            raise doc.error(where + (("name",) if isinstance(entry, dict) else ()), why)
        if name not in zoo:
            raise doc.error(where, f"unknown model {name!r}; known: {', '.join(sorted(zoo))} "
                            f"(in {zoo_doc.path})")
        at = ("models", name)
        base_fields = _fields_from(zoo_doc, ModelSpec, _typed(zoo[name]), at,
                                   skip=("name", "arch"))
        fields = {**base_fields, **overrides, "name": name}
        missing = [f.name for f in dataclasses.fields(ModelSpec)
                   if f.default is dataclasses.MISSING and f.name not in fields]
        if missing:
            raise zoo_doc.error(at, f"missing required fields {missing}")
        own = entry if isinstance(entry, dict) else {}
        zoo_arch = _arch(zoo_doc, zoo[name]["arch"], at + ("arch",)) \
            if "arch" in zoo[name] else {}
        run_arch = _arch(doc, own["arch"], where + ("arch",)) if "arch" in own else {}
        arch = {**zoo_arch, **run_arch}
        problem = arch_problem(name, arch)
        if problem is not None and (needs_arch or arch):
            raise zoo_doc.error(at, problem)
        fields["arch"] = tuple((a, arch[a]) for a in ARCH_FIELDS if a in arch)
        spec = ModelSpec(**fields)
        why = dense_ffn_problem(spec) if needs_arch else None   # what the command will say
        if why is not None:
            raise (doc.error(where + ("arch", "ffn"), why) if "ffn" in run_arch
                   else zoo_doc.error(at + ("arch", "ffn"), why))
        check_model(doc if overrides else zoo_doc, spec, where if overrides else at)
        if any(m.name == name for m in out):
            raise doc.error(where, f"model {name!r} listed twice")
        out.append(spec)
        origins[name] = _origins(doc, zoo_doc, where, at, own, zoo[name])
    return tuple(out), origins


def _typed(entry: object) -> object:
    """A model entry without its architecture keys (read by _arch, not typed as fields)."""
    return {k: v for k, v in entry.items() if k not in ARCH_KEYS} \
        if isinstance(entry, dict) else entry


def _origins(doc: _Doc, zoo_doc: _Doc, where: tuple, at: tuple, own: dict, zoo_entry: dict
             ) -> tuple[tuple[str, str], ...]:
    """(flag group, where it was written) of one model: each `arch.<aspect>` and `flags`
    from the runbook's entry when it gives them, else from the zoo's; then `arch_source`."""
    out = []
    for key in [f"arch.{a}" for a in ARCH_FIELDS] + ["flags"]:
        path = tuple(key.split("."))
        if _has(own, path):
            out.append((key, _at(doc, where + path, "runbook")))
        elif _has(zoo_entry, path):
            out.append((key, _at(zoo_doc, at + path, "zoo")))
    source = _arch_source(doc, own, where) or _arch_source(zoo_doc, zoo_entry, at)
    if source is not None:
        out.append(("arch_source", source))
    return tuple(out)


def _has(entry: dict, path: tuple) -> bool:
    """Whether a (nested) key is written in a mapping."""
    for key in path:
        if not isinstance(entry, dict) or key not in entry:
            return False
        entry = entry[key]
    return True


def _backends(doc: _Doc, data: dict, base: Path) -> tuple[BackendConfig, ...]:
    entries = data["backends"]
    if not isinstance(entries, list) or not entries:
        raise doc.error(("backends",), "must be a non-empty list of backends")
    out: list[BackendConfig] = []
    for i, entry in enumerate(entries):
        where = ("backends", i)
        fields = _fields_from(doc, BackendConfig, entry, where)
        _require(doc, entry, ("name", "kind"), where)
        why = bounds.path_component_problem(fields["name"], "backend")
        if why is not None:
            raise doc.error(where + ("name",), why)
        if fields["kind"] not in BACKEND_KINDS:
            raise doc.error(where + ("kind",), "must be " + " or ".join(BACKEND_KINDS))
        fields.setdefault("module", fields["name"])
        if any(b.name.lower() == fields["name"].lower() for b in out):
            raise doc.error(where + ("name",), f"backend {fields['name']!r} listed twice")
        fields["options"] = _backend_options(doc, entry, fields, where, base)
        out.append(BackendConfig(**fields))
    if not any(b.select for b in out):
        raise doc.error(("backends",), "at least one backend needs select: true")
    return tuple(out)


def _backend_options(doc: _Doc, entry: dict, fields: dict, where: tuple, base: Path):
    """The entry's `options:` as its backend's OPTIONS dataclass, every field checked."""
    kind, module, name = fields["kind"], fields["module"], fields["name"]
    try:
        cls = options_type(kind, module, name)
    except BadInput as exc:
        raise doc.error(where + ("module",), f"no backend module {module_name(kind, module)!r} "
                        f"for backend {name!r}") from exc
    why = module_problem(kind, module, name)
    if why is not None:
        raise doc.error(where + ("module",), f"backend {name!r}: {why}")
    where = where + ("options",)
    kwargs = _fields_from(doc, cls, entry.get("options"), where)
    for name in cls.PATH_FIELDS:        # relative: against the runbook's folder
        if isinstance(kwargs.get(name), str) and kwargs[name]:
            kwargs[name] = resolve_against(kwargs[name], base)
            why = special_file_problem(kwargs[name])
            if why is not None:
                raise doc.error(where + (name,), why)
    try:
        return cls(**kwargs)
    except ValueError as exc:
        sub = getattr(exc, "field", None)       # `planner.num_buckets`: a nested option
        raise doc.error(where + tuple(sub.split(".")) if sub else where, str(exc)) from exc


def _capacity(doc: _Doc, data: dict) -> CapacityConfig:
    where = ("capacity",)
    raw = _mapping(doc, data.get("capacity"), where,
                   ("measure", "pad_multiple", "grid", "max_remeasure", "max_validate_steps",
                    "target"))
    fields = _fields_from(doc, CapacityConfig, {k: v for k, v in raw.items()
                                                if k not in ("measure", "grid", "target")},
                          where, skip=("measure", "decimals", "target"))
    fields["target"] = held_out_field(doc, where + ("target",), parse_target,
                                       raw.get("target"))
    if "measure" in raw:
        fields["measure"] = canonical_capacity(doc, raw["measure"], where + ("measure",))
    grid = raw.get("grid", "exact")
    try:
        fields["decimals"] = Grid.parse(grid).decimals
    except ValueError:
        raise doc.error(where + ("grid",),
                        f"must be exact or decimals-<D>, got {_shown(doc, grid)}") from None
    cfg = CapacityConfig(**fields)
    for name in ("pad_multiple",):
        if getattr(cfg, name) <= 0:
            raise doc.error(where + (name,), "must be positive")
    for name in ("max_remeasure", "max_validate_steps"):
        if getattr(cfg, name) < 0:
            raise doc.error(where + (name,), "must be >= 0")
    return cfg


def _phase(doc: _Doc, data: dict, key: str, default: PhaseConfig) -> PhaseConfig:
    if key not in data:
        return default
    fields = _fields_from(doc, type(default), data[key], (key,))
    phase = dataclasses.replace(default, **fields)
    if phase.warmup < 0:
        raise doc.error((key, "warmup"), "must be >= 0")
    for name in ("iters", "trials"):
        if getattr(phase, name) < 1:
            raise doc.error((key, name), "must be >= 1")
    return phase


def _shape(doc: _Doc, data: dict) -> Shape:
    fields = _fields_from(doc, Shape, data["shape"], ("shape",))
    _require(doc, data["shape"], ("seq", "micro_batch", "global_batch", "ep"), ("shape",))
    for name, value in fields.items():
        if value <= 0:
            raise doc.error(("shape", name), "must be positive")
    return Shape(**fields)


def _limits(doc: _Doc, value: object) -> Limits:
    """`limits:` checked, with `unclassified: {retries, then}` (its policy, a mapping)."""
    data = _mapping(doc, value, ("limits",), tuple(f.name for f in dataclasses.fields(Limits)))
    fields = _fields_from(doc, Limits, {k: v for k, v in data.items() if k != "unclassified"},
                          ("limits",), skip=("unclassified",))
    if data.get("unclassified") is not None:
        fields["unclassified"] = UnclassifiedPolicy(**_fields_from(
            doc, UnclassifiedPolicy, data["unclassified"], ("limits", "unclassified")))
    return Limits(**fields)


def _container(doc: _Doc, data: dict) -> ContainerConfig:
    """`container:` checked: a known engine, an image when one is used, mounts SRC:DST[:FLAGS]
    without commas. The launcher is checked at preflight (`--launcher` may override the
    runbook's): the local launcher runs no container and refuses one."""
    where = ("container",)
    fields = _fields_from(doc, ContainerConfig, data.get("container"), where)
    cfg = ContainerConfig(**fields)
    if cfg.engine not in CONTAINER_ENGINES:
        raise doc.error(where + ("engine",), "must be " + " or ".join(CONTAINER_ENGINES))
    if not cfg.enabled:
        if cfg.image or cfg.mounts or cfg.workdir:
            raise doc.error(where + ("engine",), "is none, so image/mounts/workdir would be "
                            "read by nothing: set engine: pyxis or apptainer")
        return cfg
    if not cfg.image:
        raise doc.error(where + ("image",), f"engine {cfg.engine} needs an image")
    if cfg.executable not in ("apptainer", "singularity"):
        raise doc.error(where + ("executable",), "must be apptainer or singularity")
    for i, mount in enumerate(cfg.mounts):
        parts = str(mount).split(":")
        if "," in mount or not 2 <= len(parts) <= 3 or not all(parts[:2]):
            raise doc.error(where + ("mounts", i), f"must be SRC:DST[:FLAGS] without commas, "
                            f"got {mount!r}")
    return cfg


def _paths_map(doc: _Doc, data: dict, key: str, base: Path, resolve: bool) -> dict:
    raw = _mapping(doc, data.get(key), (key,), None if resolve else PATH_KEYS)
    out = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise doc.error((key, name), f"must be a path string, got {_shown(doc, value)}")
        out[name] = (base / value).resolve() if resolve else value
    return out


def _ladder_names(doc, raw_ladder: dict, key: str, kind: str, known) -> tuple[str, ...]:
    """`ladder.<key>`: a list of names of this runbook's `known` models or backends (empty
    when absent); the first unknown one is refused, naming the field."""
    names = tuple(_check_type(doc, m, str, ("ladder", key, i)) for i, m in
                  enumerate(_check_type(doc, raw_ladder.get(key, []), list, ("ladder", key))))
    unknown = [m for m in names if m not in {x.name for x in known}]
    if unknown:
        raise doc.error(("ladder", key), f"{unknown[0]!r} is not a {kind} of this runbook")
    return names


def load_runbook(path: str | Path) -> Runbook:
    """Load and validate a runbook YAML; raises BadInput naming file:line: field."""
    path = Path(path)
    doc = _read_doc(path)
    data = _mapping(doc, doc.data, (), TOP_KEYS)
    _require(doc, data, REQUIRED_TOP, ())
    base = path.parent
    campaign = _check_type(doc, data["campaign"], str, ("campaign",))
    why = bounds.campaign_name_problem(campaign)
    if why is not None:
        raise doc.error(("campaign",), why)
    launcher = _check_type(doc, data.get("launcher", "local"), str, ("launcher",))
    if launcher not in LAUNCHER_NAMES:
        raise doc.error(("launcher",), "must be local or slurm")
    mem = data.get("device_memory_gb")
    if mem is not None:
        mem = _check_type(doc, mem, float, ("device_memory_gb",))
        if mem <= 0:
            raise doc.error(("device_memory_gb",), "must be positive")
    gph = cell_wall_hours(doc, data)
    slurm = _fields_from(doc, SlurmConfig, data.get("slurm"), ("slurm",))
    limits = _limits(doc, data.get("limits"))
    raw_backends = data.get("backends")
    needs_arch = isinstance(raw_backends, list) and any(
        isinstance(b, dict) and b.get("kind") == CLUSTER_KIND for b in raw_backends)
    models, origins = _models(doc, data, base, needs_arch)
    if data.get("routing") is not None:                # campaign-wide default workload
        routing = _check_type(doc, data["routing"], dict, ("routing",))
        models = tuple(m if m.routing else dataclasses.replace(m, routing=routing)
                       for m in models)
    runbook = Runbook(
        path=path, campaign=campaign, models=models, shape=_shape(doc, data),
        models_path=base / data.get("models_file", "models.yaml"),
        backends=_backends(doc, data, base), capacity=_capacity(doc, data),
        measure=_phase(doc, data, "measure", PhaseConfig(warmup=1, iters=4)),
        timing=_phase(doc, data, "timing", TimingConfig(warmup=2, iters=10, trials=3)),
        limits=limits, launcher=launcher,
        device_memory_bytes=None if mem is None else int(mem * 2**30),
        seed=_check_type(doc, data.get("seed", 1234), int, ("seed",)),
        repositories=_paths_map(doc, data, "repositories", base, resolve=True),
        paths=_paths_map(doc, data, "paths", base, resolve=False),
        slurm=SlurmConfig(**slurm), container=_container(doc, data),
        cell_wall_hours=gph, model_origins=origins,
        max_parallel_cells=_check_type(doc, data.get("max_parallel_cells", 1), int,
                                       ("max_parallel_cells",)),
        publish=PublishConfig(**_fields_from(doc, PublishConfig, data.get("publish") or {},
                                             ("publish",))))
    if runbook.publish.live and not runbook.publish.repo:
        raise doc.error(("publish", "repo"), "live: true needs the dataset repository ORG/NAME")
    raw_validate = data.get("validate")
    if raw_validate is not None:
        _mapping(doc, raw_validate, ("validate",), ("seed", "iters"))
        runbook = dataclasses.replace(runbook, validate_config=held_out_field(
            doc, ("validate",), resolve_validate, raw_validate, runbook.seed,
            runbook.measure.iters))
    if runbook.slurm.allocation not in ALLOCATIONS:
        raise doc.error(("slurm", "allocation"), f"must be one of {', '.join(ALLOCATIONS)}")
    if runbook.slurm.allocation_idle_s < 10:
        raise doc.error(("slurm", "allocation_idle_s"), "must be >= 10 (seconds)")
    raw_frontier = data.get("frontier")
    if raw_frontier is not None:
        _mapping(doc, raw_frontier, ("frontier",), ("rungs",))
        rungs = _check_type(doc, raw_frontier.get("rungs", DEFAULT_FRONTIER_RUNGS), int,
                            ("frontier", "rungs"))
        if not 1 <= rungs <= MAX_FRONTIER_RUNGS:
            raise doc.error(("frontier", "rungs"), f"must be 1..{MAX_FRONTIER_RUNGS}, got {rungs}")
        runbook = dataclasses.replace(runbook, frontier_rungs=rungs)
    raw_ladder = data.get("ladder")
    if raw_ladder is not None:
        _mapping(doc, raw_ladder, ("ladder",), ("routing_sigma", "models", "backends"))
        sigmas = _check_type(doc, raw_ladder.get("routing_sigma"), list, ("ladder", "routing_sigma"))
        values = tuple(_check_type(doc, s, float, ("ladder", "routing_sigma", i))
                       for i, s in enumerate(sigmas))
        if not 1 <= len(values) <= MAX_LADDER_STEPS or any(v <= 0 for v in values) \
                or len(set(values)) != len(values):
            raise doc.error(("ladder", "routing_sigma"), f"must be 1..{MAX_LADDER_STEPS} distinct "
                            f"positive sigmas, got {sigmas!r}")
        names = _ladder_names(doc, raw_ladder, "models", "model", runbook.models)
        arms = _ladder_names(doc, raw_ladder, "backends", "backend", runbook.backends)
        left_out = [b.name for b in runbook.backends if b.select and arms and b.name not in arms]
        if left_out:
            raise doc.error(("ladder", "backends"), f"leaves out {left_out[0]!r}, a select "
                            "backend: each step selects its own timing capacity from them")
        if len(set(arms)) != len(arms):
            raise doc.error(("ladder", "backends"), f"names a backend twice: {list(arms)!r}")
        runbook = dataclasses.replace(runbook, ladder_sigmas=values, ladder_models=names,
                                      ladder_backends=arms)
    if runbook.max_parallel_cells < 1:
        raise doc.error(("max_parallel_cells",), "must be >= 1")
    if runbook.limits.run_timeout_s <= 0:
        raise doc.error(("limits", "run_timeout_s"), "must be positive")
    if runbook.limits.max_pending_s < 0:
        raise doc.error(("limits", "max_pending_s"), "must be >= 0 (0: wait forever)")
    if runbook.limits.infra_retries < 0:
        raise doc.error(("limits", "infra_retries"), "must be >= 0")
    if runbook.limits.unclassified.then not in UNCLASSIFIED_ACTIONS:
        raise doc.error(("limits", "unclassified", "then"),
                        f"must be one of {', '.join(UNCLASSIFIED_ACTIONS)}, got "
                        f"{runbook.limits.unclassified.then!r}")
    check_shape(doc, runbook, CLUSTER_KIND)
    check_capacities(doc, runbook)
    check_timing(doc, runbook)
    return runbook
