"""Where a script that reruns one cell writes (repro.sh, slurm.sbatch): the directory given as
its first argument, else a new one beside the cell. Every path inside the cell directory in
its argv and environment becomes one inside that directory, so a rerun writes nowhere else
and never over the cell it reproduces."""

from __future__ import annotations

import shlex
from pathlib import Path

OUT_VAR = "OUT"


def cell_dirs(cdir: Path | str | None) -> tuple[str, ...]:
    """The cell directory as written and resolved (argv may hold either)."""
    if cdir is None:
        return ()
    return tuple(dict.fromkeys((str(Path(cdir).resolve()), str(cdir))))


def out_words(text: str, dirs: tuple[str, ...]) -> str:
    """`text` as one shell word, every occurrence of the cell directory replaced by the
    output directory ("$OUT"), the rest quoted."""
    for cdir in dirs:
        if cdir and cdir in text:
            return f'"${OUT_VAR}"'.join(shlex.quote(p) if p else "" for p in text.split(cdir))
    return shlex.quote(text)


def out_dir_lines(beside: str, suffix: str, label: str, missing: str | None = None,
                  missing_exit: int = 1, fresh: str | None = None) -> list[str]:
    """Shell lines setting $OUT: argument 1, else a new directory `<beside><suffix>.XXXXXX`
    (or `<beside><suffix>.<fresh>`, created with its parents, when `fresh` is a shell word
    such as "$SLURM_JOB_ID": a name known before the script runs); absolute either way, and
    announced on stderr. `beside` is a shell word (a quoted path or "$here"). A given
    directory that does not exist is created, or, with `missing` (the batch script: a cell
    directory missing on the node means a file system the node does not share), refused:
    `missing` is echoed with the directory and the host, then exit `missing_exit`."""
    if missing is None:
        given = f'mkdir -p -- "${OUT_VAR}" || exit 1'
    else:
        given = (f'[ -d "${OUT_VAR}" ] || {{ echo "{missing} ${OUT_VAR} is missing on '
                 f'$(hostname) (create it; or the results are on a file system this node '
                 f'does not share)" >&2; exit {int(missing_exit)}; }}')
    make = (f'{OUT_VAR}={beside}"{suffix}."{fresh}; mkdir -p -- "${OUT_VAR}" || exit 1'
            if fresh else f'{OUT_VAR}=$(mktemp -d {beside}"{suffix}.XXXXXX") || exit 1')
    return [f'{OUT_VAR}="${{1:-}}"',
            f'if [ -z "${OUT_VAR}" ]; then {make}; else {given}; fi',
            f'{OUT_VAR}=$(cd "${OUT_VAR}" && pwd -P) || exit 1',
            f'echo "{label}: writing into ${OUT_VAR}" >&2']
