"""Load one upload from untrusted files into the rules' in-memory model (harness.audit.model).

Cells are the directories under `cells/` and every directory a row's `cell_dir` names inside
the upload (the earlier campaign kept them under per-step folders). Each cell and table is
covered by the nearest `provenance.txt` at or above its directory inside the upload.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path, PurePosixPath

from harness.audit.model import Cell, Upload, cell_key, norm
from harness.audit.readers import (
    SMALL_CAP_BYTES,
    plain_file,
    read_fields,
    read_json,
    read_logs,
    read_runbook,
    read_table,
    runbook_pad_multiple,
    safe_read,
    withheld,
)
from harness.audit.rules.rederive import expected_shape
from harness.audit.vocab import IGNORED_TAG, TABLES, ignored_name, is_ignored_row
from harness.errors import BadInput, EpcapError
from harness.io.boundary.events import decode_line
from harness.io.safeio import open_stream
from harness.io.yamldoc import Doc
from harness.results.facts import facts_problem
from harness.results.layout import CELL_JSON, EVENTS_JSONL, PROVENANCE_TXT, RUNBOOK_YAML
from harness.runbook.load import load_runbook
from harness.runbook.zoo import ZOO


class Coverage:
    """The nearest provenance.txt at or above a directory inside the upload (read once each)."""

    def __init__(self, root: Path, folder: Path) -> None:
        self.root, self.folder = root, folder
        self._read: dict[Path, tuple[dict | None, str | None]] = {}

    def fields_at(self, directory: Path) -> tuple[dict | None, str | None]:
        """(fields, problem) of directory/provenance.txt itself."""
        if directory not in self._read:
            self._read[directory] = read_fields(self.root, directory / PROVENANCE_TXT)
        return self._read[directory]

    def nearest(self, directory: Path) -> tuple[dict | None, str | None, str | None]:
        """(fields, relative path of the file, problem): the problem of the cell's own file
        when none covers it, or of a withheld one on the way up (a Git LFS pointer: the
        file that would cover it is there, its content is not)."""
        own_problem = None
        current = directory
        while True:
            fields, problem = self.fields_at(current)
            if fields is not None:
                where = (current / PROVENANCE_TXT).relative_to(self.folder).as_posix()
                return fields, where, None
            if own_problem is None and problem != "no provenance.txt" and (
                    current == directory or withheld(problem)):
                own_problem = problem               # present but unreadable: say so
            if current == self.folder or self.folder not in current.parents:
                return None, None, own_problem
            current = current.parent


def inside(folder: Path, key: str) -> Path | None:
    """folder/key when key is a plain relative path that stays in folder, through no link."""
    parts = PurePosixPath(key).parts
    if not parts or PurePosixPath(key).is_absolute() or ".." in parts:
        return None
    path = folder
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    return path


def load_cell(root: Path, folder: Path, path: Path, coverage: Coverage,
              tags: dict[str, dict[str, str]], upload: Upload | None = None) -> Cell:
    """One cell directory: its covering provenance, cell.json and logs."""
    cell = Cell(path.name, path.relative_to(folder).as_posix(), where=path)
    cell.provenance, cell.provenance_at, cell.provenance_problem = coverage.nearest(path)
    cell.cell_json, cell.cell_json_problem = read_json(root, path / CELL_JSON)
    backend = ""
    if isinstance((cell.cell_json or {}).get("cell"), dict):
        backend = norm(str(cell.cell_json["cell"].get("backend") or ""))
    parts = path.name.split("__")
    backend = backend or (norm(parts[1]) if len(parts) > 1 else "")
    shape = expected_shape(upload, cell) if upload is not None else None
    job = (root, path, cell.cell_json, tags.get(backend), shape)
    if upload is not None:
        upload.pending_logs[cell.path] = job        # read by read_pending_logs, once each
    else:
        cell.logs, cell.logs_problem = read_logs(*job)
    return cell


PARALLEL_LOG_BYTES = 64 << 20       # logs this large are summarised on several cores
_JOBS: list[dict] = []              # the jobs a forked worker reads (inherited, not pickled)


def _read_job(key: str) -> tuple[str, tuple]:
    return key, read_logs(*_JOBS[0][key])


def read_pending_logs(upload: Upload) -> None:
    """Summarise every loaded cell's logs once (the harness's summarize, through the bounded
    reader), on several forked workers when they are large: it is half the audit's cost."""
    jobs, upload.pending_logs = dict(upload.pending_logs), {}
    size = 0
    for root, path, *_rest in jobs.values():
        try:
            size += sum(os.stat(e.path).st_size for e in os.scandir(path)
                        if e.name.endswith(".log") and plain_file(root, Path(e.path)))
        except OSError:
            continue
    workers = min(len(jobs), os.cpu_count() or 1, 16)
    if workers >= 2 and size >= PARALLEL_LOG_BYTES and "fork" in mp.get_all_start_methods():
        _JOBS[:] = [jobs]
        try:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
                done = dict(pool.map(_read_job, sorted(jobs), chunksize=1))
        finally:
            _JOBS.clear()
    else:
        done = {key: read_logs(*job) for key, job in sorted(jobs.items())}
    for key, (facts, problem) in done.items():
        upload.cells[key].logs, upload.cells[key].logs_problem = facts, problem


def scan_cells(root: Path, folder: Path, cells: Path, upload: Upload, coverage: Coverage,
               tags: dict[str, dict[str, str]]) -> None:
    """The entries of one `cells/` directory (links are not followed; __cap1p75 ignored)."""
    prefix = cells.relative_to(folder).as_posix()
    if cells.is_symlink():
        upload.cells[prefix] = Cell("cells", prefix, problem=f"{prefix}/ is a link (not followed)")
        return
    if not cells.is_dir():
        return
    try:
        entries = sorted(os.scandir(cells), key=lambda e: e.name)
    except OSError as exc:
        upload.cells[prefix] = Cell("cells", prefix,
                                    problem=f"{prefix}/ unreadable ({exc.strerror or exc})")
        return
    for entry in entries:
        key = f"{prefix}/{entry.name}"
        if IGNORED_TAG.search(entry.name):
            upload.ignored_cells.append(entry.name)
        elif entry.is_symlink():
            upload.cells[key] = Cell(entry.name, key, problem="a link (not followed)")
        elif entry.is_dir(follow_symlinks=False):
            upload.cells[key] = load_cell(root, folder, Path(entry.path), coverage, tags,
                                          upload)


def step_folders(folder: Path) -> list[Path]:
    """Sub-folders (not hidden, not links) holding a `cells/` of their own (one per step)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    return [Path(e.path) for e in entries
            if not e.name.startswith(".") and e.name != "cells"
            and e.is_dir(follow_symlinks=False) and os.path.lexists(Path(e.path) / "cells")]


def load_cells(root: Path, folder: Path, upload: Upload, coverage: Coverage,
               tags: dict[str, dict[str, str]]) -> None:
    """Cells under cells/ (and <step>/cells/), and those the rows name, links not followed."""
    for step in [folder, *step_folders(folder)]:
        scan_cells(root, folder, step / "cells", upload, coverage, tags)
    for table in upload.tables.values():
        for row in table.rows:
            key = cell_key(row)
            path = inside(folder, key) if key and key not in upload.cells else None
            if path is not None and path.is_dir() and not IGNORED_TAG.search(path.name):
                upload.cells[key] = load_cell(root, folder, path, coverage, tags, upload)


def load_as_run(root: Path, folder: Path, upload: Upload) -> None:
    """The upload's runbook.yaml as evidence: its sha256, and the harness's own Runbook of it
    (through the harness loader: the bounded YAML reader), or why it could not be loaded."""
    if not os.path.lexists(folder / RUNBOOK_YAML):
        upload.runbook_problem = f"no {RUNBOOK_YAML}"
        return
    data, problem = safe_read(root, folder / RUNBOOK_YAML, SMALL_CAP_BYTES)
    if data is None:
        upload.runbook_problem = f"{RUNBOOK_YAML}: {problem}"
        return
    upload.runbook_sha256 = hashlib.sha256(data).hexdigest()
    try:
        upload.runbook = load_runbook(folder / RUNBOOK_YAML)
    except EpcapError as exc:
        upload.runbook_problem = f"{RUNBOOK_YAML} does not load: {str(exc)[:200]}"
        upload.runbook = with_recorded_zoo(folder, data, upload) or None
    except (OSError, ValueError) as exc:
        upload.runbook_problem = f"{RUNBOOK_YAML} does not load: {type(exc).__name__}"


def recorded_models_sha(folder: Path) -> str | None:
    """models_sha256 of events.jsonl's first event (the zoo the campaign read), else None."""
    try:
        with open_stream(folder / EVENTS_JSONL) as handle:     # a regular file only
            event, _, _ = decode_line(handle.readline(1 << 16).rstrip(b"\n"))
    except (BadInput, OSError):
        return None
    value = event.get("models_sha256") if isinstance(event, dict) else None
    return value if isinstance(value, str) else None


def with_recorded_zoo(folder: Path, data: bytes, upload: Upload):
    """The runbook as run when its model zoo was not frozen beside it (a models_file outside
    the results directory): loaded against the harness's shipped zoo, only when that zoo's
    sha256 is the one events.jsonl recorded for the run; else None."""
    recorded = recorded_models_sha(folder)
    if recorded is None or hashlib.sha256(ZOO.read_bytes()).hexdigest() != recorded:
        return None
    try:
        text = data.decode("utf-8")
        doc = Doc(folder / RUNBOOK_YAML, text, quote=False).data
    except (EpcapError, UnicodeDecodeError):
        return None
    rel = doc.get("models_file", "models.yaml") if isinstance(doc, dict) else None
    if not isinstance(rel, str) or PurePosixPath(rel).is_absolute():
        return None
    depth = sum(part == ".." for part in PurePosixPath(rel).parts)
    with tempfile.TemporaryDirectory(prefix="epcap-audit-") as tmp:
        base = Path(tmp).joinpath(*[f"d{i}" for i in range(depth)])
        zoo = (base / rel).resolve()
        if Path(tmp).resolve() not in zoo.parents:
            return None
        base.mkdir(parents=True, exist_ok=True)
        zoo.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ZOO, zoo)
        (base / RUNBOOK_YAML).write_bytes(data)
        try:
            book = load_runbook(base / RUNBOOK_YAML)
        except (EpcapError, OSError, ValueError):
            return None
    upload.runbook_problem = None
    upload.notes.append(f"{RUNBOOK_YAML}: its models_file was not frozen with it; loaded "
                        f"against the harness's zoo, whose sha256 is the one "
                        f"{EVENTS_JSONL} recorded")
    return book


def load_upload(root: Path, folder: Path, pad_multiple: int) -> Upload:
    """Everything the rules need from one upload directory."""
    upload = Upload(path=folder.relative_to(root).as_posix(), pad_multiple=pad_multiple)
    coverage = Coverage(root, folder)
    for name in TABLES:
        if os.path.lexists(folder / name):
            upload.tables[name] = read_table(root, folder / name)
    for table in upload.tables.values():
        upload.ignored_cells += [ignored_name(r) for r in table.rows if is_ignored_row(r)]
        table.rows = [r for r in table.rows if not is_ignored_row(r)]
    upload.provenance, upload.provenance_problem = coverage.fields_at(folder)
    upload.facts_problem = facts_problem(folder)     # campaign.json: the report's boundary
    book = read_runbook(root, folder)
    upload.folder = folder
    load_as_run(root, folder, upload)
    # the telemetry format is the SPEC's and the backend's, never the upload's runbook's
    load_cells(root, folder, upload, coverage, {})
    read_pending_logs(upload)
    upload.ignored_cells = sorted(set(upload.ignored_cells))
    upload.runbook_pad_multiple = runbook_pad_multiple(book)
    if upload.runbook_pad_multiple is not None and upload.runbook_pad_multiple != pad_multiple:
        upload.notes.append(f"runbook.yaml says capacity.pad_multiple: "
                            f"{upload.runbook_pad_multiple!r}; the audit uses its own "
                            f"{pad_multiple} (--pad-multiple), never the upload's")
    return upload
