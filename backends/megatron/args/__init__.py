"""The flags each pinned Megatron-LM commit accepts, kept as data, and the static argv check.

`data/<commit>.json` is written by `scripts/megatron_args.py` from that commit's
megatron/training/arguments.py (and the config dataclasses it turns into flags), read with
`ast`: Megatron is never imported. `data/overlay-<name>.json` adds flags of a fork whose source
could not be read here, each with where it is documented. `check_argv` is the preflight: it
names every unknown flag or choice and the file that should define it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class MegatronSource:
    """The Megatron-LM code a cluster backend runs: repository, commit, and flag overlays."""

    repository: str
    commit: str
    ref: str = ""
    overlays: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.repository}@{self.commit[:12]}"


@dataclass(frozen=True)
class AcceptedArgs:
    """Flags -> {file, line, value: none|one|optional|many, choices} for one source."""

    source: MegatronSource
    flags: dict
    files: tuple[str, ...]


def data_path(commit: str) -> Path:
    return DATA / f"{commit}.json"


@lru_cache(maxsize=16)
def load_args(source: MegatronSource) -> AcceptedArgs:
    """The accepted flags of `source` (its commit's data plus overlays); FileNotFoundError
    names the script that generates missing data."""
    path = data_path(source.commit)
    if not path.is_file():
        raise FileNotFoundError(
            f"no argument data for {source.label}: generate {path.relative_to(DATA.parents[1])} "
            f"with scripts/megatron_args.py --git <Megatron-LM clone> --commit {source.commit}")
    raw = json.loads(path.read_text(encoding="utf-8"))
    flags, files = dict(raw["flags"]), list(raw["files"])
    for name in source.overlays:
        extra = json.loads((DATA / f"overlay-{name}.json").read_text(encoding="utf-8"))
        flags.update(extra["flags"])
        files.append(extra["repository"] + ":" + extra["file"])
    return AcceptedArgs(source, flags, tuple(files))


ARGUMENTS_FILE = "megatron/training/arguments.py"


def defining_file(files: tuple[str, ...]) -> str:
    """Where a new flag would be defined: Megatron's arguments.py (every flag, plain or from a
    config dataclass, is registered there), whatever order the files were read in."""
    return ARGUMENTS_FILE if ARGUMENTS_FILE in files or not files else files[0]


def check_argv(argv: list[str], accepted: AcceptedArgs) -> list[str]:
    """Problems of one Megatron argv (the arguments after the script): unknown flags and
    choices, and flags missing their value. Empty when the pinned code accepts it all."""
    problems, i, label = [], 0, accepted.source.label
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            problems.append(f"stray argument {tok!r}: not the value of any flag ({label})")
            continue
        name, eq, inline = tok.partition("=")
        entry = accepted.flags.get(name)
        if entry is None:
            problems.append(f"unknown flag {name}: {label} does not define it "
                            f"(checked {', '.join(accepted.files)}; the flag would have to "
                            f"be defined in {defining_file(accepted.files)})")
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        values = [inline] if eq else []
        kind = entry["value"]
        if not eq and kind in ("one", "optional", "many"):
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
                if kind != "many":
                    break
        if kind == "none" and values:
            problems.append(f"flag {name} takes no value ({entry['file']}:{entry['line']})")
        if kind in ("one", "many") and not values:
            problems.append(f"flag {name} needs a value ({entry['file']}:{entry['line']})")
        choices = entry.get("choices")
        for v in values if choices is not None else ():
            if v not in choices:
                problems.append(f"invalid choice {v!r} for {name}: {label} accepts "
                                f"{choices} ({entry['file']}:{entry['line']})")
    return problems


def flag_values(argv: list[str], flag: str) -> list[str]:
    """Every value given to `flag` in an argv (`--x v` and `--x=v`)."""
    out = []
    for i, arg in enumerate(argv):
        if arg == flag:
            out.append(argv[i + 1] if i + 1 < len(argv) else "")
        elif arg.startswith(flag + "="):
            out.append(arg.split("=", 1)[1])
    return out
