"""Provenance capture (docs/spec.md: provenance): what ran, where, with which code; secrets redacted.

`capture_provenance` returns ordered `key: value` facts; `write_provenance` writes them
atomically as provenance.txt; `read_provenance` reads one back (untrusted: size-capped).
Machine and harness facts are captured once per process (they cannot change under a running
process); repositories, command line, time and environment are read on every call, so one
capture per cell stays well under 0.5 s.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from harness import __version__
from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.boundary.tools import (
    FLOODED,
    OUTPUT_MAX_BYTES,
    commit_problem,
    git_problem,
    run_tool,
)
from harness.io.redact import (  # noqa: F401  (re-exported: provenance is where callers look)
    REDACTED,
    is_secret_env,
    redact_argv,
    scrub,
    secret_values,
)
from harness.io.safeio import open_stream, read_bytes

READ_CAP_BYTES = 1 << 20     # provenance.txt of an upload is untrusted: read at most 1 MiB
GIT_TIMEOUT_S = 10.0
ENV_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "SLURM_JOB_ID",
             "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NTASKS", "WORLD_SIZE")
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_", "UCX_")
NVSHMEM_PACKAGES = ("nvidia-nvshmem-cu12", "nvidia-nvshmem-cu13", "nvidia-nvshmem")


def run_git(repo: Path, *args: str,
            timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess | None:
    """`git -C repo args...` through the tools boundary (argv list, never a shell, output
    decoded safely); None if git cannot run (missing, or no answer in time)."""
    done = run_tool(["git", "-C", str(repo), *args], timeout_s=timeout)
    if done.code is None:
        return None
    return subprocess.CompletedProcess(list(done.argv), done.code, done.out, done.err)


def git_why(repo: Path) -> str | None:
    """Why `repo` cannot be read with git, named as what it is (git missing, dubious
    ownership, not a git checkout), or None when it can."""
    if not Path(repo).is_dir():
        return f"{repo}: no such directory (a local clone is needed)"
    return git_problem(run_tool(["git", "-C", str(repo), "rev-parse", "--git-dir"],
                                timeout_s=GIT_TIMEOUT_S), str(repo))


def _git(repo: Path, *args: str) -> str | None:
    """stdout of a successful git command, stripped; None on any failure."""
    done = run_git(repo, *args)
    return done.stdout.strip() if done is not None and done.returncode == 0 else None


def date_problem(text: str) -> str | None:
    """Why `text` (git's `%cI`) is not an ISO 8601 date (None when it is)."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return f"its commit date is not ISO 8601: {ascii(text)[:60]}"
    return None


def git_facts(repo: Path) -> dict[str, str] | None:
    """sha, ISO commit date, branch and dirty flag of a checkout; None if not a git checkout;
    {"refused": why} when git's answer is not a commit id and a date (checked before it is
    stored: a broken or hostile git never writes its output into provenance)."""
    asked = run_tool(["git", "-C", str(repo), "log", "-1", "--format=%H %cI"],
                     timeout_s=GIT_TIMEOUT_S)
    if FLOODED in (asked.problem or ""):
        return {"refused": f"its answer is over {OUTPUT_MAX_BYTES} bytes"}
    head = asked.out.strip() if asked.ok else None
    if asked.ok and not head:        # git said nothing and succeeded: not a commit either
        return {"refused": "its answer is empty, not a commit id"}
    status = _git(repo, "status", "--porcelain=v1", "--branch")
    if not head or status is None:
        return None
    sha, _, date = head.partition(" ")
    why = commit_problem(sha) or date_problem(date)
    if why:                          # a git that answers something else: never stored
        return {"refused": why}
    lines = status.splitlines()
    branch = "detached"
    if lines and lines[0].startswith("## "):
        name = lines[0][3:].split("...", 1)[0].split(" ", 1)[0]
        branch = "detached" if name.startswith("HEAD") else name
    dirty = any(not line.startswith("## ") for line in lines)
    return {"sha": sha, "date": date, "branch": branch or "detached",
            "dirty": "true" if dirty else "false"}


def repo_line(path: Path) -> str:
    """`<sha> <commit-iso-date> <branch> dirty=<bool>`, or `missing <path>` (never invented)."""
    path = Path(path).expanduser()
    if not path.exists():
        return f"missing {path}"
    facts = git_facts(path)
    if facts is not None and "refused" in facts:
        return f"git-refused {path} ({facts['refused']})"
    if facts is None:
        why = git_why(path) or ""
        if FLOODED in why:
            return f"git-refused {path} (its answer is over {OUTPUT_MAX_BYTES} bytes)"
        if why.startswith("git is not installed"):
            return f"git-missing {path}"
        if "dubious ownership" in why:
            return f"git-refused {path} (dubious ownership: git -C {path} status)"
        return f"not-a-git-checkout {path}"
    return f"{facts['sha']} {facts['date']} {facts['branch']} dirty={facts['dirty']}"


@lru_cache(maxsize=1)
def _harness_facts() -> tuple[tuple[str, str], ...]:
    """Version, commit, commit date and dirty flag of the epcap checkout itself."""
    root = Path(__file__).resolve().parents[2]
    top = _git(root, "rev-parse", "--show-toplevel")
    facts = git_facts(root) if top and Path(top).resolve() == root else None
    if facts is None or "refused" in facts:
        return (("harness.version", __version__), ("harness.commit", "not-a-git-checkout"),
                ("harness.commit_date", "not-a-git-checkout"),
                ("harness.dirty", "not-a-git-checkout"))
    return (("harness.version", __version__), ("harness.commit", facts["sha"]),
            ("harness.commit_date", facts["date"]), ("harness.dirty", facts["dirty"]))


def harness_facts() -> dict[str, str]:
    """`harness.version`, `harness.commit`, `harness.commit_date`, `harness.dirty` of the
    epcap checkout running now (what an audit names as its own version)."""
    return dict(_harness_facts())


def _gpu_from_nvml() -> dict[str, str] | None:
    """GPU model, count and driver from NVML (nvidia-ml-py), or None when unavailable."""
    try:
        import pynvml  # optional extra: nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(count)]
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 -- NVML raises its own error family; fall back to smi
        return None
    return _gpu_summary([_text(n) for n in names], _text(driver), "nvml")


def _text(value: object) -> str:
    """NVML returns bytes in old bindings, str in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu_from_smi() -> dict[str, str] | None:
    """GPU facts from `nvidia-smi --query-gpu`, or None when it is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = run_tool([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                    timeout_s=20)
    rows = [line.rsplit(",", 1) for line in done.out.splitlines() if "," in line]
    if not done.ok or not rows:     # failed, no answer, or not UTF-8: nothing invented
        return None
    return _gpu_summary([r[0].strip() for r in rows], rows[0][1].strip(), "nvidia-smi")


def _gpu_summary(names: list[str], driver: str, source: str) -> dict[str, str]:
    """Fold per-GPU names into model (distinct names joined) and count."""
    if not names:
        return {"gpu.model": "no-gpu", "gpu.count": "0", "gpu.driver": driver or "no-gpu",
                "gpu.source": source}
    return {"gpu.model": ",".join(dict.fromkeys(names)), "gpu.count": str(len(names)),
            "gpu.driver": driver, "gpu.source": source}


def _torch_facts() -> dict[str, str]:
    """torch, CUDA and NCCL versions as torch reports them; `not-installed` when absent."""
    if "torch" not in sys.modules:
        light = _torch_facts_unimported()
        if light is not None:
            return light
    try:
        import torch  # optional: absent on CPU machines
    except ImportError:
        return {"torch": "not-installed", "cuda": "not-installed", "nccl": "not-installed"}
    except Exception as exc:  # noqa: BLE001 -- a broken torch raises anything on import
        raise _broken_torch(exc) from exc
    try:
        cuda = torch.version.cuda or "not-installed"     # None on a CPU build of torch
        version_text = str(torch.__version__)
    except Exception as exc:  # noqa: BLE001 -- a torch without its version module
        raise _broken_torch(exc, torch) from exc
    nccl = "not-installed"
    if cuda != "not-installed":
        try:
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:  # noqa: BLE001 -- torch raises RuntimeError/AttributeError variously
            nccl = "not-installed"
    return {"torch": version_text, "cuda": cuda, "nccl": nccl}


def _broken_torch(exc: Exception, module: object = None) -> BadInput:
    """A clear error (exit 2) for a `torch` that imports but is not torch (a stray package
    first on PYTHONPATH, a half-installed wheel), naming where it was found."""
    where = getattr(module, "__file__", None) or "torch"
    return BadInput(f"the torch found here is broken ({type(exc).__name__}: {exc}); remove "
                    f"it from PYTHONPATH or reinstall torch, then rerun", path=str(where),
                    field="PYTHONPATH")


def _torch_facts_unimported() -> dict[str, str] | None:
    """For a CPU build, read torch/version.py as text (importing torch costs seconds);
    None when torch has CUDA (NCCL's version needs the import) or the file is unclear."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {"torch": "not-installed", "cuda": "not-installed", "nccl": "not-installed"}
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    cpu_build = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*None\s*$", text, re.M)
    if not version or not cpu_build:
        return None
    return {"torch": version.group(1), "cuda": "not-installed", "nccl": "not-installed"}


def _nvshmem_version() -> str:
    """Version of the installed nvidia-nvshmem package, else of a header, else not-installed."""
    for name in NVSHMEM_PACKAGES:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    for header in _nvshmem_headers():
        version = _header_version(header)
        if version:
            return version
    return "not-installed"


def _nvshmem_headers() -> list[Path]:
    """Candidate nvshmem_version.h files: $NVSHMEM_HOME, then the usual prefixes."""
    roots = [os.environ.get("NVSHMEM_HOME", ""), "/usr/local/nvshmem", "/usr", "/opt/nvshmem"]
    return [Path(r) / "include" / "nvshmem_version.h" for r in roots if r]


def _header_version(header: Path) -> str | None:
    """MAJOR.MINOR.PATCH from nvshmem_version.h, or None."""
    try:
        text = header.read_text(errors="replace")[:65536]
    except OSError:
        return None
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#define\s+NVSHMEM_VENDOR_{part}_VERSION\s+(\d+)", text)
        if not match:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


@lru_cache(maxsize=1)
def _static_facts() -> tuple[tuple[str, str], ...]:
    """Facts fixed for the life of a process (harness code, machine, libraries)."""
    gpu = _gpu_from_nvml() or _gpu_from_smi() or {
        "gpu.model": "no-gpu", "gpu.count": "0", "gpu.driver": "no-gpu", "gpu.source": "none"}
    facts = dict(_harness_facts())
    facts.update(gpu)
    facts.update(_torch_facts())
    facts["nvshmem"] = _nvshmem_version()
    facts["python"] = platform.python_version()
    facts["platform"] = platform.platform()
    return tuple(facts.items())


def _env_facts(environ: dict[str, str]) -> dict[str, str]:
    """Environment variables that change results (threads, NCCL, Slurm); never secrets."""
    names = [n for n in sorted(environ)
             if (n in ENV_NAMES or n.startswith(ENV_PREFIXES)) and not is_secret_env(n)]
    return {f"env.{n}": environ[n] for n in names}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open_stream(path) as handle:           # a regular file (never a FIFO)
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def capture_provenance(command_line: list[str], repositories: dict[str, Path],
                       runbook_path: Path | None = None, *,
                       analysis_version: int | None = None) -> dict[str, str]:
    """All docs/spec.md: provenance facts for one run, as ordered `key -> value` (secrets
    redacted). `analysis_version` (harness/pipeline/version.py, passed by the campaign: this
    room sits below the pipeline) is written beside the `harness.*` facts."""
    environ = dict(os.environ)
    secrets = secret_values(environ)
    fields: dict[str, str] = {}
    for key, value in _static_facts():
        fields[key] = value
        if key == "harness.dirty" and analysis_version is not None:
            fields["analysis_version"] = str(analysis_version)
    fields["command_line"] = shlex.join(redact_argv([str(a) for a in command_line], secrets))
    fields["utc_start"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    fields["hostnames"] = socket.gethostname()
    for name in sorted(repositories):
        fields[f"repo.{name}"] = repo_line(Path(repositories[name]))
    if runbook_path is not None:
        path = Path(runbook_path)
        fields["runbook.path"] = str(path)
        fields["runbook.sha256"] = file_sha256(path) if path.is_file() else f"missing {path}"
    fields.update(_env_facts(environ))
    return redact_fields(fields, secrets)


def redact_fields(fields: dict[str, str], secrets: list[str] | None = None) -> dict[str, str]:
    """Drop secret-named keys, scrub secret values, keep every value on one line."""
    secrets = secret_values() if secrets is None else secrets
    out: dict[str, str] = {}
    for key, value in fields.items():
        key = " ".join(str(key).split()).replace(":", "_")
        if key.startswith("env.") and is_secret_env(key[4:]):
            continue
        text = " ".join(str(value).splitlines())
        out[scrub(key, secrets)] = scrub(text, secrets)
    return out


def render(fields: dict[str, str]) -> str:
    """`key: value` lines (docs/spec.md: provenance)."""
    return "".join(f"{k}: {v}\n" for k, v in fields.items())


def write_provenance(path: Path | str, fields: dict[str, str]) -> None:
    """Write provenance.txt atomically (temp file, fsync, rename); secrets redacted again."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, render(redact_fields(fields)))


def parse_provenance(text: str, path: str | None = None, strict: bool = False
                     ) -> list[tuple[str, str]]:
    """`key: value` lines (docs/spec.md: provenance) in file order; blank and `#` lines are
    skipped; a key has no white space. Any other line: BadInput naming path:line when
    `strict` (our own results), else skipped (untrusted uploads)."""
    pairs = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and not any(c.isspace() for c in key):
            pairs.append((key, value.strip()))
        elif strict:
            raise BadInput("expected `key: value`", path=path, line=no, field="provenance")
    return pairs


def read_provenance(path: Path | str, cap: int = READ_CAP_BYTES) -> dict[str, str]:
    """A provenance.txt as fields, leniently; reads at most `cap` bytes (untrusted)."""
    with open_stream(path) as handle:           # a regular file (never a FIFO)
        data = handle.read(cap)
    return dict(parse_provenance(data.decode("utf-8", errors="replace")))


def read_provenance_lines(path: Path | str) -> list[tuple[str, str]]:
    """One of our own provenance.txt files, strictly, as ordered (key, value) pairs."""
    text = read_bytes(path, max_bytes=READ_CAP_BYTES).decode("utf-8", errors="replace")
    return parse_provenance(text, str(path), strict=True)


def parse_repo_line(value: str) -> dict[str, str] | None:
    """Split `<sha> <date> <branch> dirty=<bool>`; None for `missing ...` or anything else."""
    parts = value.split()
    if len(parts) < 2 or not re.fullmatch(r"[0-9a-fA-F]{7,64}", parts[0]):
        return None
    dirty = next((p.split("=", 1)[1] for p in parts[2:] if p.startswith("dirty=")), "")
    branch = parts[2] if len(parts) > 2 and not parts[2].startswith("dirty=") else ""
    return {"sha": parts[0].lower(), "date": parts[1], "branch": branch, "dirty": dirty}


if __name__ == "__main__":  # pragma: no cover -- handy: python -m harness.results.provenance
    sys.stdout.write(render(capture_provenance(sys.argv, {})))
