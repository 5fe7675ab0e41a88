"""Containers for Slurm cells: the srun options (pyxis) or the exec prefix (apptainer) that put
a cell's ranks inside the runbook's image, and the image facts recorded in provenance.

Upstream flags: NVIDIA/pyxis README.md @046f4149 (`--container-image`, `--container-mounts=
SRC:DST[:FLAGS][,SRC:DST...]`, `--container-workdir`); apptainer/apptainer
cmd/internal/cli/action_flags.go @df5d92b5 (`--nv`; `-B|--bind` "src[:dest[:opts]]", several
"by a comma separated list"; `--pwd` "initial working directory ... inside the container")."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.runbook.model import ContainerConfig

DIGEST_UNRESOLVED = "unresolved"
# The srun option pyxis adds (a SPANK plugin: `srun --help` lists it only where it is loaded;
# without it srun says `srun: unrecognized option '--container-image'`).
PYXIS_OPTION = "--container-image"


def plugin_problem(cfg: ContainerConfig, timeout_s: float = 30.0) -> str | None:
    """Why this host cannot start the runbook's container, or None: pyxis must be loaded
    into srun (its `--help` lists --container-image), apptainer's executable on PATH."""
    if cfg.engine == "pyxis":
        try:
            proc = subprocess.run(["srun", "--help"], capture_output=True, text=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"container engine pyxis: srun --help failed ({exc})"
        if PYXIS_OPTION not in proc.stdout + proc.stderr:
            return (f"container engine pyxis: the pyxis plugin is not loaded (`srun --help` "
                    f"lists no {PYXIS_OPTION}; every cell would end `srun: unrecognized "
                    f"option '{PYXIS_OPTION}'`)")
    if cfg.engine == "apptainer" and shutil.which(cfg.executable) is None:
        return f"container engine apptainer: {cfg.executable} is not on PATH"
    return None


def mount_covers(mount: str, path: PurePosixPath) -> bool:
    """Whether a `SRC:DST[:FLAGS]` mount shows host `path` at the same path inside."""
    src, _, rest = mount.partition(":")
    dst = PurePosixPath(rest.split(":")[0] or src)
    try:
        rel = path.relative_to(dst)
    except ValueError:
        return False
    return PurePosixPath(src) / rel == path


def unmounted(cfg: ContainerConfig, paths: list[Path]) -> list[Path]:
    """The paths a containerised cell writes that no mount shows at the same path inside
    the container (its writes would stay in the container, or fail)."""
    if not cfg.enabled:
        return []
    return [p for p in paths
            if not any(mount_covers(m, PurePosixPath(os.path.abspath(p))) for m in cfg.mounts)]


@dataclass(frozen=True)
class ContainerLaunch:
    """How one srun step enters the container: extra srun options, then an argv prefix."""

    srun_options: tuple[str, ...] = ()
    exec_prefix: tuple[str, ...] = ()


def container_launch(cfg: ContainerConfig, gpus_per_node: int) -> ContainerLaunch:
    """pyxis: srun options; apptainer: `apptainer exec [--nv] [--bind ...] [--pwd ...] IMAGE`."""
    if cfg.engine == "pyxis":
        opts = [f"--container-image={cfg.image}"]
        if cfg.mounts:
            opts.append(f"--container-mounts={','.join(cfg.mounts)}")
        if cfg.workdir:
            opts.append(f"--container-workdir={cfg.workdir}")
        return ContainerLaunch(srun_options=tuple(opts))
    if cfg.engine == "apptainer":
        argv = [cfg.executable, "exec"]
        if gpus_per_node > 0:
            argv.append("--nv")
        if cfg.mounts:
            argv += ["--bind", ",".join(cfg.mounts)]
        if cfg.workdir:
            argv += ["--pwd", cfg.workdir]
        return ContainerLaunch(exec_prefix=(*argv, str(cfg.image)))
    return ContainerLaunch()


def image_digest(image: str, hash_limit_bytes: int | None = None) -> str:
    """`sha256:<hex>` of a local image file, the digest pinned in a reference
    (`...@sha256:<hex>`), else `unresolved (<why>)`: never a guessed value."""
    if "@sha256:" in image:
        return "sha256:" + image.rsplit("@sha256:", 1)[1]
    path = Path(image)
    if not path.is_file():
        return f"{DIGEST_UNRESOLVED} (not a file readable here; a tag is not a digest)"
    size = path.stat().st_size
    if hash_limit_bytes is not None and size > hash_limit_bytes:
        return f"{DIGEST_UNRESOLVED} ({size} bytes, over the hashing limit)"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def container_facts(cfg: ContainerConfig) -> dict[str, str]:
    """Provenance lines for the container (`container.engine`, `.image`, `.digest`, ...)."""
    if not cfg.enabled:
        return {"container.engine": "none"}
    limit = os.environ.get("EPCAP_IMAGE_HASH_LIMIT_BYTES")
    facts = {"container.engine": cfg.engine, "container.image": str(cfg.image),
             "container.digest": image_digest(str(cfg.image), int(limit) if limit else None)}
    if cfg.mounts:
        facts["container.mounts"] = ",".join(cfg.mounts)
    if cfg.workdir:
        facts["container.workdir"] = cfg.workdir
    return facts
