#!/usr/bin/env python3
"""Write backends/megatron/args/data/<commit>.json: the flags one Megatron-LM commit accepts.

    python scripts/megatron_args.py --git /path/to/Megatron-LM --commit <sha|ref> \
        --repository NVIDIA/Megatron-LM [--ref refs/pull/2368/head]
    python scripts/megatron_args.py --checkout /path/to/Megatron-LM --commit <sha> ...

Reads megatron/training/arguments.py and the dataclasses its ArgumentGroupFactory calls
name, with `ast` (backends/megatron/args/extract.py); Megatron is never imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.megatron.args import data_path  # noqa: E402
from backends.megatron.args.extract import Source, extract, git_commit  # noqa: E402


def render(meta: dict, flags: dict) -> str:
    """The data file: metadata, then one flag per line (sorted, diff-friendly)."""
    head = json.dumps(meta, indent=1)[:-2]
    rows = [f" {json.dumps(k)}: {json.dumps(flags[k], sort_keys=True)}" for k in sorted(flags)]
    return head + ',\n "flags": {\n' + ",\n".join(rows) + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--git", help="a Megatron-LM git directory (reads the commit's blobs)")
    where.add_argument("--checkout", help="a Megatron-LM work tree at --commit")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--repository", default="NVIDIA/Megatron-LM")
    ap.add_argument("--ref", default="", help="where the commit was found (recorded)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.git:
        commit = git_commit(args.git, args.commit)
        source = Source(args.git, commit)
    else:
        commit = args.commit
        source = Source(args.checkout)
    flags, files, unresolved = extract(source)
    meta = {"repository": args.repository, "commit": commit, "ref": args.ref,
            "files": files, "unresolved": unresolved,
            "generated_by": "scripts/megatron_args.py (ast, no import of Megatron)"}
    out = Path(args.out) if args.out else data_path(commit)
    out.write_text(render(meta, flags), encoding="utf-8")
    print(f"{out}: {len(flags)} flags from {len(files)} files of {args.repository}@{commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
