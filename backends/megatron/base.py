"""Shared Megatron-LM launch command for the cluster adapters (echo, ultraep, moonep).

One cell becomes `torchrun ... <megatron>/pretrain_gpt.py <model, shape, dispatcher args>`.
Each adapter subclasses `MegatronBackend` and supplies its pinned Megatron-LM source
(repository, commit), its dispatcher flags as that code defines them and its failure
signatures; `preflight(argv)` checks an argv against the commit's accepted flags
(backends/megatron_args). Overridable from the runbook (`flags`, `options`; docs/cluster.md).

Rendezvous: an argv gets no shell expansion, so `$MASTER_ADDR` cannot be written into it.
One node: `torchrun --standalone` (local rendezvous, nothing to expand). Several nodes: a
fixed `sh -c` trampoline expands the MASTER_ADDR/MASTER_PORT the launcher exports and passes
every other argument through "$@" untouched (no user text is ever parsed by a shell).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from backends.megatron.args import MegatronSource, check_argv, flag_values, load_args
from backends.megatron.validate import validate_commands
from harness.api.backend import (
    DEFAULT_FAILURE_PATTERNS,
    Backend,
    LaunchSpec,
    ModelSpec,
    NoOptions,
    OptionError,
    RunRequest,
)
from harness.errors import BadInput
from harness.grid.capacity import budget_tokens
from harness.results.layout import ROUTER_TRACE_DIR
from harness.vocab import Status

# The fixed multi-node trampoline: "$@" carries the real torchrun arguments verbatim.
RDZV_TRAMPOLINE = 'exec "$0" --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" "$@"'

# Signatures every Megatron run can print, on top of harness.api.backend.DEFAULT_FAILURE_PATTERNS.
MEGATRON_FAILURE_PATTERNS: dict[str, tuple[str, ...]] = {
    Status.ASSERT: (r"Assertion `.*` failed", r"RuntimeError: .*[Aa]ssert(?:ion)? failed"),
    Status.BADFLAG: (r"error: unrecognized arguments", r"error: ambiguous option",
                r"error: argument --\S+: expected", r"invalid choice:"),
    Status.DOES_NOT_FIT: (r"CUDA error: out of memory", r"cudaErrorMemoryAllocation",
                     r"CUBLAS_STATUS_ALLOC_FAILED",
                     r"(?:nvshmem|NVSHMEM).*(?:malloc|alloc\w*).*(?:fail|FAIL)",
                     r"(?:nvshmem|NVSHMEM).*[Ss]ymmetric heap"
                     r".*(?:exhausted|insufficient|too small)"),
    Status.INFRA: (r"NCCL WARN .*(?:NET/IB|Connection closed|remote process exited)",
              r"srun: error: Node failure", r"TCPStore.*(?:Broken pipe|Connection refused)",
              r"ibv_\w+ failed", r"Socket Timeout"),
}

# Telemetry and timing switches the run scripts' dispatcher hook reads (docs/cluster.md).
TELEMETRY_ENV = "MOE_DROP_DEBUG"


def merge_patterns(*tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Concatenate pattern tables class by class, keeping order and dropping duplicates."""
    out: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for cls_name, pats in table.items():
            seen = out.get(cls_name, ())
            out[cls_name] = seen + tuple(p for p in pats if p not in seen)
    return out


def model_args(model: ModelSpec) -> list[str]:
    """Megatron arguments from one zoo entry's numbers (layers, sizes, heads, experts); its
    architecture flags (the dense FFN size among them) are `arch_args`, the model's own."""
    args = ["--num-layers", str(model.layers), "--hidden-size", str(model.hidden),
            "--num-attention-heads", str(model.heads)]
    if 0 < model.kv_heads < model.heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    args += ["--num-experts", str(model.experts), "--moe-router-topk", str(model.topk),
             "--moe-ffn-hidden-size", str(model.expert_ffn)]
    if model.shared_ffn:
        args += ["--moe-shared-expert-intermediate-size", str(model.shared_ffn)]
    if model.first_dense_layers:
        freq = f"([0]*{model.first_dense_layers}+[1]*{model.moe_layers})"
        args += ["--moe-layer-freq", freq]
    args += ["--moe-router-dtype", model.router_dtype]
    return args


def arch_args(model: ModelSpec, backend: str) -> list[str]:
    """The architecture flags the model states (zoo `arch:`, docs/runbook.md#architecture);
    BadInput when it states none: no flag of another architecture stands in for them."""
    if not model.arch:
        raise BadInput(f"{backend}: model {model.name} states no architecture flags (zoo "
                       "arch:, docs/runbook.md#architecture)", field=f"models.{model.name}")
    return list(model.arch_flags)


def common_args() -> list[str]:
    """Training settings the harness gives every model (no architecture flag: those are the
    model's own, `arch_args`)."""
    return ["--transformer-impl", "transformer_engine",
            "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
            "--moe-grouped-gemm", "--moe-router-load-balancing-type", "aux_loss",
            "--moe-aux-loss-coeff", "1e-3",
            "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
            "--bf16", "--use-distributed-optimizer",
            "--lr", "1.0e-4", "--min-lr", "1.0e-5", "--lr-decay-style", "constant",
            "--weight-decay", "0.1", "--clip-grad", "1.0", "--init-method-std", "0.02",
            "--eval-iters", "0", "--eval-interval", "1000000", "--log-interval", "1"]


def shape_args(req: RunRequest) -> list[str]:
    """Sequence, batch and parallel sizes, iterations (`req.iterations`: warmup plus measured
    iterations, x trials when timed) and the request's routing seed (`--seed`: the held-out
    seed on held-out runs, docs/drop-risk.md)."""
    shape, iters = req.shape, req.iterations
    return ["--seq-length", str(shape.seq), "--max-position-embeddings", str(shape.seq),
            "--micro-batch-size", str(shape.micro_batch),
            "--global-batch-size", str(shape.global_batch),
            "--expert-model-parallel-size", str(shape.ep),
            "--train-iters", str(iters), "--exit-interval", str(iters),
            "--seed", str(req.seed)]


def data_args(req: RunRequest) -> list[str]:
    """Mock data (paths.data absent or `mock`) or a real --data-path with its tokenizer."""
    data = req.paths.get("data", "mock")
    if data in ("", "mock"):
        return ["--mock-data", "--tokenizer-type", "NullTokenizer",
                "--vocab-size", str(req.model.vocab)]
    tokenizer = req.paths.get("tokenizer")
    if not tokenizer:
        raise BadInput("real data needs paths.tokenizer (or set paths.data: mock)",
                       field="paths.tokenizer")
    tok_model = str(PurePosixPath(tokenizer) / req.model.hf_name)
    return ["--data-path", data, "--split", "100,0,0",
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok_model]


def check_router_dtype(argv: list[str], model: ModelSpec, backend: str) -> None:
    """Every Megatron backend: when the zoo entry says fp32 (the router QWEN2_57B lost in
    bf16), every `--moe-router-dtype` of the command says fp32 too (argparse keeps the last)."""
    if model.router_dtype != FP32:
        return
    dtypes = flag_values(argv, ROUTER_DTYPE_FLAG)
    if not dtypes or any(d != FP32 for d in dtypes):
        raise BadInput(f"{backend}: model {model.name} needs {ROUTER_DTYPE_FLAG} fp32 (zoo "
                       f"router_dtype) and the command gives {dtypes}; check the runbook flags",
                       field=f"backends.{backend}.flags")


def flag_occurrences(argv: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """Each `--flag` of an argv with the values that follow each occurrence."""
    out: dict[str, list[tuple[str, ...]]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            continue
        name, eq, inline = tok.partition("=")
        values = [inline] if eq else []
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        out.setdefault(name, []).append(tuple(values))
    return out


def check_no_conflicts(argv: list[str], field: str) -> None:
    """Refuse an argv that gives one flag different values (argparse silently keeps the
    last, so a runbook flag could undo an adapter's on the cluster)."""
    clashes = {f: v for f, v in flag_occurrences(argv).items() if len(set(v)) > 1}
    if clashes:
        shown = "; ".join(f"{f} given {[' '.join(x) for x in v]}" for f, v in clashes.items())
        raise BadInput(f"a flag appears twice with different values: {shown}", field=field)


def git_head(path: Path) -> str | None:
    """The commit checked out at `path` when it is a git work tree, else None."""
    if not (path / ".git").exists():
        return None
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def fill_template(arg: str, values: dict[str, str]) -> str:
    """Replace `{capacity}`-style placeholders in a runbook-supplied argument (no eval)."""
    for key, value in values.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


# Megatron's router-trace recording (training side), defined at the pinned main and MoonEP
# commits in megatron/training/config/training_config.py (TrainingConfig); Megatron writes
# router_trace_rank{N}.jsonl under the path (megatron/core/transformer/moe/router_trace.py).
ROUTER_DTYPE_FLAG = "--moe-router-dtype"
FP32 = "fp32"
TRACE_PATH_FLAG = "--moe-routing-trace-path"
TRACE_ITERS_FLAG = "--moe-routing-trace-max-training-iters"
SOURCE_KEYS = ("repository", "commit", "ref", "overlays", "path")
# Folders named <full commit> holding Megatron-LM trees (tests; reproducing the check by hand).
TREES_ENV = "EPCAP_MEGATRON_TREES"
# "0" turns real validation off (a tree the CPU shim cannot import); the notes then say so.
VALIDATE_ENV = "EPCAP_MEGATRON_VALIDATE"
ARGUMENTS_PY = "megatron/training/arguments.py"
NAMES_ONLY = "against argument names only"


@dataclass(frozen=True)
class MegatronOptions(NoOptions):
    """Runbook `options:` of a cluster adapter (docs/cluster.md)."""

    torchrun: str = "torchrun"                  # the torchrun executable
    script: str = "pretrain_gpt.py"             # under the checkout
    dispatcher_args: tuple[str, ...] | None = None   # replaces the library/capacity flags
    env: dict = field(default_factory=dict)     # extra environment (wins over ours)
    megatron: dict | None = None                # {repository, commit, ref, overlays, path}
    record_routing_trace: bool = False          # runs asked to record routing write traces

    def __post_init__(self) -> None:
        raw = self.megatron
        if raw is None:
            return
        unknown = sorted(set(raw) - set(SOURCE_KEYS))
        if unknown:
            raise OptionError("megatron", f"unknown key(s) {unknown}; allowed: {SOURCE_KEYS}")
        commit = raw.get("commit")
        if not isinstance(commit, str) or len(commit) != 40 or \
                any(c not in "0123456789abcdef" for c in commit):
            raise OptionError("megatron", f"commit must be a full 40-hex sha, got {commit!r}")
        if not isinstance(raw.get("overlays", []), list):
            raise OptionError("megatron", "overlays must be a list of overlay names")


OPTIONS = MegatronOptions


def source_from_options(options: MegatronOptions, default: MegatronSource) -> MegatronSource:
    """The runbook's `options.megatron` (checked by MegatronOptions) or the default."""
    raw = options.megatron
    if raw is None:
        return default
    return MegatronSource(str(raw.get("repository", default.repository)), str(raw["commit"]),
                          str(raw.get("ref", "")),
                          tuple(str(o) for o in raw.get("overlays", default.overlays)))


class MegatronBackend(Backend):
    """A dispatch library run inside Megatron-LM `pretrain_gpt.py` under torchrun."""

    options_type = MegatronOptions
    library = "base"
    patterns: dict[str, tuple[str, ...]] = {}
    default_source = MegatronSource("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
                                    "refs/heads/main")

    @property
    def source(self) -> MegatronSource:
        """The Megatron-LM repository and commit this backend's argv is built for."""
        return source_from_options(self.options, self.default_source)

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """The library's own dispatcher flags, as its pinned Megatron-LM code defines them."""
        raise NotImplementedError

    def dispatcher_args(self, req: RunRequest) -> list[str]:
        """Library selection and capacity flags; `options.dispatcher_args` replaces them."""
        values = self.template_values(req)
        custom = self.options.dispatcher_args
        if custom is not None:
            return [fill_template(str(a), values) for a in custom]
        return self.library_args(req, values)

    def trace_args(self, req: RunRequest) -> list[str]:
        """Megatron's router-trace recording (`options.record_routing_trace`) for runs whose
        request asks for their routing (`req.record_routing`)."""
        if not (self.options.record_routing_trace and req.record_routing):
            return []
        return [TRACE_PATH_FLAG, str(PurePosixPath(str(req.cell_dir)) / ROUTER_TRACE_DIR),
                TRACE_ITERS_FLAG, str(req.iterations)]

    def rules(self, args: list[str]) -> list[str]:
        """Cross-flag conditions of the pinned code (hook for subclasses)."""
        return []

    def preflight(self, argv: list[str]) -> list[str]:
        """Static check of a launch argv against the pinned commit's accepted flags: each
        unknown flag or choice, naming the file that should define it. No GPU, no import."""
        script = str(self.options.script)
        cut = next((i for i, a in enumerate(argv) if a.endswith(script)), None)
        if cut is None:
            return [f"{self.name}: no {script} in the command"]
        args = argv[cut + 1:]
        try:
            accepted = load_args(self.source)
        except FileNotFoundError as exc:
            return [f"{self.name}: {exc}"]
        return [f"{self.name}: {p}" for p in check_argv(args, accepted) + self.rules(args)]

    def tree(self) -> tuple[Path | None, str]:
        """(the Megatron-LM tree readable here for this backend's commit, why not when None):
        options.megatron.path, else $EPCAP_MEGATRON_TREES/<commit>."""
        raw = self.options.megatron or {}
        commit = self.source.commit
        candidates = [Path(str(raw["path"]))] if raw.get("path") else []
        if os.environ.get(TREES_ENV):
            candidates.append(Path(os.environ[TREES_ENV]) / commit)
        for path in candidates:
            if (path / ARGUMENTS_PY).is_file():
                head = git_head(path)
                if head is not None and head != commit:
                    return None, f"{path} is at {head[:12]}, not {commit[:12]}"
                return path, ""
        where = ", ".join(str(p) for p in candidates) or "no path"
        return None, f"no Megatron-LM tree of {self.source.label} readable here ({where})"

    def fork_flags(self) -> dict[str, str]:
        """Flags of the overlays (a fork's documented flags) as {flag: value kind}."""
        base = load_args(MegatronSource(self.source.repository, self.source.commit))
        return {f: e["value"] for f, e in load_args(self.source).flags.items()
                if f not in base.flags}

    def validate_commands(self, commands: list[tuple[str, LaunchSpec]]) -> tuple[str, list[str]]:
        """Megatron's own parse_args, validate_args and transformer config, run on CPU
        (backends/megatron/validate.py) over every launch, when the tree is readable here;
        else the plain statement that only argument names were checked."""
        if os.environ.get(VALIDATE_ENV) == "0":
            return f"{NAMES_ONLY} (real validation turned off by {VALIDATE_ENV}=0)", []
        tree, why = self.tree()
        if tree is None:
            return f"{NAMES_ONLY} ({why})", []
        script = str(self.options.script)
        by_world: dict[int, list[tuple[str, list[str]]]] = {}
        for label, spec in commands:
            cut = next(i for i, a in enumerate(spec.argv) if a.endswith(script))
            by_world.setdefault(spec.nodes * spec.gpus_per_node, []).append(
                (label, spec.argv[cut + 1:]))
        problems, extra = [], self.fork_flags()
        for world, batch in by_world.items():
            try:
                verdicts = validate_commands(str(tree), batch, world, extra_flags=extra)
            except RuntimeError as exc:
                problems.append(f"{self.name}: Megatron's own validation could not run on "
                                f"{tree}: {exc} (set {VALIDATE_ENV}=0 to check argument "
                                f"names only)")
                continue
            for v in verdicts:
                if not v.accepted:
                    problems.append(f"{self.name}: {v.id}: Megatron rejects the command "
                                    f"({v.stage}, {v.error}): {v.message} ({v.where}, "
                                    f"{self.source.label})")
        forks = f" plus the documented fork flags {sorted(extra)}" if extra else ""
        return (f"with Megatron's own parse_args, validate_args and transformer config of "
                f"{self.source.label} at {tree}{forks}"), problems

    def template_values(self, req: RunRequest) -> dict[str, str]:
        """Values a runbook `dispatcher_args` template may use."""
        n = req.shape.uniform_tokens(req.model.topk)
        return {"capacity": req.cell.capacity, "pad_multiple": str(req.pad_multiple),
                "budget": str(budget_tokens(req.cell.capacity, n)), "uniform_tokens": str(n),
                "library": self.library}

    def check(self, req: RunRequest) -> None:
        """Refuse requests this library cannot run (hook for subclasses)."""

    def topology(self, req: RunRequest) -> tuple[int, int]:
        """(nodes, gpus_per_node) from the runbook's slurm section, checked against EP."""
        nodes, gpus = req.slurm.nodes, req.slurm.gpus_per_node
        if nodes < 1 or gpus < 1:
            raise BadInput(f"cluster backend {self.name!r} needs slurm.nodes >= 1 and "
                           f"slurm.gpus_per_node >= 1 (got {nodes}, {gpus})",
                           field="slurm.gpus_per_node")
        world, shape = nodes * gpus, req.shape
        if world % shape.ep:
            raise BadInput(f"world size {world} (nodes x gpus_per_node) is not a multiple of "
                           f"ep {shape.ep}", field="shape.ep")
        if shape.global_batch % (shape.micro_batch * world):
            raise BadInput(f"global_batch {shape.global_batch} is not a multiple of "
                           f"micro_batch x world size ({shape.micro_batch} x {world})",
                           field="shape.global_batch")
        return nodes, gpus

    def launcher_args(self, req: RunRequest, nodes: int, gpus: int) -> list[str]:
        """torchrun and its rendezvous (standalone on one node; trampoline on several)."""
        torchrun = str(self.options.torchrun)
        if nodes == 1:
            return [torchrun, "--standalone", "--nnodes", "1", "--nproc-per-node", str(gpus)]
        return ["sh", "-c", RDZV_TRAMPOLINE, torchrun, "--nnodes", str(nodes),
                "--nproc-per-node", str(gpus), "--rdzv-backend", "c10d",
                "--rdzv-id", req.cell.name]

    def checkout(self, req: RunRequest) -> str | None:
        """This backend's Megatron-LM checkout: options.megatron.path, else paths.megatron."""
        raw = self.options.megatron
        own = raw.get("path") if raw else None
        return str(own) if own else req.paths.get("megatron")

    def script(self, req: RunRequest) -> str:
        """Absolute path of pretrain_gpt.py from paths.megatron."""
        megatron = self.checkout(req)
        if not megatron:
            raise BadInput("cluster backends need paths.megatron (the Megatron-LM checkout)",
                           field="paths.megatron")
        name = str(self.options.script)
        return str(PurePosixPath(megatron) / name)

    def env(self, req: RunRequest) -> dict[str, str]:
        """Telemetry and timing switches (the timing ones when `req.timed`) plus runbook
        `options.env` (which wins). EPCAP_CELL and EPCAP_PURPOSE label the run."""
        values = self.template_values(req)
        env = {TELEMETRY_ENV: "1", "PYTHONUNBUFFERED": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
               "EPCAP_CELL": req.cell.name, "EPCAP_PURPOSE": req.cell.purpose,
               "EPCAP_CAPACITY": values["capacity"], "EPCAP_BUDGET_TOKENS": values["budget"],
               "EPCAP_PAD_MULTIPLE": values["pad_multiple"]}
        if req.timed:
            env.update({"EPCAP_TIMING": "1", "EPCAP_TIMING_WARMUP": str(req.phase.warmup),
                        "EPCAP_TIMING_ITERS": str(req.phase.iters),
                        "EPCAP_TIMING_TRIALS": str(req.phase.trials)})
        extra = self.options.env or {}
        env.update({str(k): str(v) for k, v in extra.items()})
        return env

    def command(self, req: RunRequest) -> LaunchSpec:
        """The full launch: torchrun around pretrain_gpt.py, one task per node."""
        self.check(req)
        nodes, gpus = self.topology(req)
        argv = (self.launcher_args(req, nodes, gpus) + [self.script(req)]
                + model_args(req.model) + arch_args(req.model, self.name) + common_args()
                + shape_args(req) + data_args(req)
                + self.dispatcher_args(req) + self.trace_args(req)
                + [str(f) for f in req.model.flags]
                + [str(f) for f in self.config.flags])
        check_router_dtype(argv, req.model, self.name)
        check_no_conflicts(argv, field=f"backends.{self.name}.flags")
        return LaunchSpec(argv=argv, env=self.env(req), ntasks=nodes, nodes=nodes,
                          gpus_per_node=gpus, cwd=self.checkout(req))

    def flag_origins(self, model: ModelSpec) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The flags this backend adds to every command of `model` that are not the model's
        own, by where they come from (the dry run prints them beside the model's)."""
        return ((f"harness, from the zoo's numbers ({__name__}.model_args)",
                 tuple(model_args(model))),
                (f"harness default ({__name__}.common_args)", tuple(common_args())),
                (f"runbook backends[{self.name}].flags", tuple(str(f) for f in self.config.flags)))

    def failure_patterns(self) -> dict[str, tuple[str, ...]]:
        """Defaults, Megatron's, the library's own, then runbook `options.failure_patterns`."""
        extra = self.options.failure_patterns or {}
        return merge_patterns(DEFAULT_FAILURE_PATTERNS, MEGATRON_FAILURE_PATTERNS,
                              self.patterns, {k: tuple(v) for k, v in extra.items()})
