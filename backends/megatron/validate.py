"""Megatron's own acceptance of launch commands: parse_args, validate_args and the transformer
config of a real Megatron-LM tree, on CPU, in a subprocess (the shim is this file).

Run as a script (never imported by the tree it checks): `python validate.py < request.json`
where the request is {"tree", "world_size", "device_capability", "te_version", "commands":
[{"id", "args"}]} and `args` are the arguments after pretrain_gpt.py. For each command it
does what megatron/training/initialize.py does before any GPU work: `parse_args()` with
sys.argv set, `validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})` (pretrain_gpt.py's
args_defaults) and `core_transformer_config_from_args(args)`, and prints one JSON answer:
{"id", "accepted", "stage", "error", "message", "where"} (where = file:line of the innermost
Megatron frame, relative to the tree when inside it).

The shim, and all it supplies (docs/cluster.md "Real validation"):
- WORLD_SIZE and RANK=0 in the environment (parse_args reads them);
- torch.cuda.get_device_capability() -> the request's capability (validate_args asks it for
  grouped GEMM); torch.cuda.device_count() -> world size;
- torch.compile -> identity (module-level compiles would start inductor, which would then
  find the triton placeholder);
- typing.override (Python 3.12) as identity when the interpreter is older;
- GPU-only or optional packages absent on a CPU machine (STUBBED) answer every attribute with a
  placeholder; transformer_engine reports the request's te_version (is_te_min_version).
Nothing here runs a kernel, allocates device memory or starts a process group.

The caller side (`validate_commands`) is imported by the backends: it starts this file with
the current interpreter and reads the answers.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
import typing
from dataclasses import dataclass
from pathlib import Path

# Packages the pinned trees import at module level that a CPU-only submitting machine lacks.
STUBBED = ("transformer_engine", "transformer_engine_torch", "triton",
           "six", "regex")      # the last two: tokenizer helpers, never called by the check
ARGS_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}     # pretrain_gpt.py's args_defaults
DEFAULT_CAPABILITY = (10, 0)                               # B200 (sm_100)
DEFAULT_TE_VERSION = "2.8.0"      # assumed, not read from the cluster: is_te_min_version sees it
RUNNER = Path(__file__).resolve()


@dataclass(frozen=True)
class Verdict:
    """Megatron's answer for one command: accepted, or the stage, exception and place."""

    id: str
    accepted: bool
    stage: str = ""
    error: str = ""
    message: str = ""
    where: str = ""


def validate_commands(tree: str, commands: list[tuple[str, list[str]]], world_size: int,
                      capability: tuple[int, int] = DEFAULT_CAPABILITY,
                      te_version: str = DEFAULT_TE_VERSION, timeout: float = 300.0,
                      extra_flags: dict[str, str] | None = None,
                      python: str = sys.executable) -> list[Verdict]:
    """Megatron's verdict on each (id, args) under the tree, from one CPU subprocess.
    `extra_flags` ({flag: "none"|"one"}) are a fork's documented flags added to the tree's
    parser (its extra_args_provider hook). RuntimeError when the runner itself fails."""
    request = {"tree": str(tree), "world_size": world_size, "device_capability": list(capability),
               "te_version": te_version, "extra_flags": dict(extra_flags or {}),
               "commands": [{"id": cid, "args": list(args)} for cid, args in commands]}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE", "RANK")}
    env.update({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
    try:
        proc = subprocess.run([python, str(RUNNER)], input=json.dumps(request),
                              capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=str(tree), check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"Megatron validation of {tree} timed out after {timeout:.0f} s") \
            from exc
    answers = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(answers) != len(commands):
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"Megatron validation runner failed on {tree} (exit "
                           f"{proc.returncode}, {len(answers)}/{len(commands)} answers): {tail}")
    return [Verdict(**json.loads(line)) for line in answers]


def parser_flags(tree: str, timeout: float = 300.0, python: str = sys.executable
                 ) -> dict[str, str]:
    """{option string: none|one|optional|many} of the tree's real Megatron parser
    (add_megatron_arguments), to hold the accepted-argument data to the source of truth."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
    proc = subprocess.run([python, str(RUNNER)], input=json.dumps(
        {"tree": str(tree), "world_size": 1, "list_flags": True, "commands": []}),
        capture_output=True, text=True, timeout=timeout, env=env, cwd=str(tree), check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"listing the parser of {tree} failed: {proc.stderr[-600:]}")
    return dict(json.loads(lines[0])["flags"])


# ---- the runner (the subprocess): stdlib + torch + the tree only ---------------------------


def _install_stubs(te_version: str) -> None:
    """Answer `import <stubbed>` (and its submodules) with permissive placeholder modules."""
    import importlib.abc
    import importlib.machinery
    import types

    class _Meta(type):
        def __getattr__(cls, name: str) -> type:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Meta(name, (_Stub,), {})

        def __getitem__(cls, item: object) -> type:
            return cls

        def __iter__(cls) -> object:
            return iter(())

        def __or__(cls, other: object) -> object:
            return cls

        def __ror__(cls, other: object) -> object:
            return cls

    class _Stub(metaclass=_Meta):
        def __init__(self, *args: object, **kwargs: object) -> None:
            self._args = args

        def __call__(self, *args: object, **kwargs: object) -> object:
            return args[0] if len(args) == 1 and callable(args[0]) else _Stub()

        def __getattr__(self, name: str) -> object:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Stub()

        def __getitem__(self, item: object) -> object:
            return self

        def __iter__(self) -> object:
            return iter(())

    class _StubModule(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            if name.startswith("__") and name not in ("__version__",):
                raise AttributeError(name)
            if name == "__version__":
                return te_version
            return _Meta(name, (_Stub,), {})

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
            if fullname.split(".")[0] in STUBBED:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):  # noqa: ANN001, ANN201
            mod = _StubModule(spec.name)
            mod.__path__ = []
            mod.__version__ = te_version
            return mod

        def exec_module(self, module):  # noqa: ANN001, ANN201
            return None

    sys.meta_path.insert(0, _Finder())


def _no_compile(fn: object = None, *args: object, **kwargs: object) -> object:
    """torch.compile stand-in: the check never runs the function, so nothing is compiled."""
    return fn if fn is not None else (lambda f: f)


def _where(tb: object, tree: str) -> str:
    """file:line of the innermost Megatron frame (a file under a `megatron/` package: the
    tree's, or an installed megatron-core), relative to the tree when inside it."""
    frames = traceback.extract_tb(tb)
    megatron = [f for f in frames if "/megatron/" in f.filename.replace(os.sep, "/")]
    frame = (megatron or frames)[-1] if frames else None
    if frame is None:
        return ""
    name = frame.filename[len(tree):].lstrip("/") if frame.filename.startswith(tree) \
        else frame.filename
    return f"{name}:{frame.lineno}"


def _argparse_where(tree: str) -> str:
    """argparse errors carry no tree frame: point at the file that defines the flags."""
    return "megatron/training/arguments.py"


def _run(request: dict) -> int:
    tree = str(Path(request["tree"]).resolve())
    world = int(request["world_size"])
    os.environ.update({"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0"})
    sys.path[:1] = [tree]          # not this folder: the tree decides every import
    _install_stubs(str(request.get("te_version") or DEFAULT_TE_VERSION))
    import torch

    cap = tuple(request.get("device_capability") or DEFAULT_CAPABILITY)
    torch.cuda.get_device_capability = lambda *a, **k: cap
    torch.cuda.device_count = lambda: world
    torch.compile = _no_compile
    if not hasattr(typing, "override"):        # Python 3.12's; newer trees import it
        typing.override = lambda fn: fn
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        from megatron.training import arguments
    extra = dict(request.get("extra_flags") or {})
    if request.get("list_flags"):
        import argparse
        parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        kinds = {}
        for action in parser._actions:  # noqa: SLF001 - argparse has no public list
            kind = "none" if action.nargs == 0 else "one" if action.nargs is None else \
                "optional" if action.nargs == "?" else "many"
            kinds.update({o: kind for o in action.option_strings if o not in ("-h", "--help")})
        out.write(json.dumps({"flags": kinds}) + "\n")
        return 0

    def provider(parser):  # noqa: ANN001, ANN202 - Megatron's extra_args_provider hook
        group = parser.add_argument_group(title="documented fork flags (epcap shim)")
        for flag, kind in extra.items():
            if kind == "none":
                group.add_argument(flag, action="store_true")
            else:
                group.add_argument(flag, type=str)
        return parser

    for cmd in request["commands"]:
        verdict = {"id": cmd["id"], "accepted": False, "stage": "", "error": "", "message": "",
                   "where": ""}
        stage, err = "parse_args", io.StringIO()
        sys.argv = ["pretrain_gpt.py"] + [str(a) for a in cmd["args"]]
        try:
            with contextlib.redirect_stdout(sys.stderr), contextlib.redirect_stderr(err):
                args = arguments.parse_args(provider if extra else None)
                stage = "validate_args"
                arguments.validate_args(args, dict(ARGS_DEFAULTS))
                stage = "core_transformer_config_from_args"
                arguments.core_transformer_config_from_args(args)
            verdict["accepted"] = True
        except SystemExit as exc:
            lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
            verdict.update(stage=stage, error="SystemExit",
                           message=(lines[-1] if lines else f"exit {exc.code}").strip(),
                           where=_argparse_where(tree))
        except Exception as exc:  # noqa: BLE001 - any rejection is Megatron's verdict
            verdict.update(stage=stage, error=type(exc).__name__,
                           message=str(exc).strip().splitlines()[0] if str(exc).strip() else
                           type(exc).__name__, where=_where(exc.__traceback__, tree))
        out.write(json.dumps(verdict) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_run(json.load(sys.stdin)))
