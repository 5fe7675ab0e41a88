"""The audit's forked workers: one pool per audit of a large upload, forked once it is
loaded, so each worker inherits the upload (nothing pickled). The per-cell work that costs
most (not-rederived's derivations, routing-not-from-seed's regenerations) is submitted to
it; a rule folds the answers in cell order, so the verdict is the serial one."""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import Future, ProcessPoolExecutor

from harness.audit.model import Upload

_FORKED: list[Upload] = []         # in a worker: the upload it was forked with


def start(upload: Upload, jobs: int) -> bool:
    """Fork the pool for `jobs` cells' work (as many workers as cores, at most 16) unless it
    runs already; False where one core or no fork is here (the rules then work serially)."""
    if upload.pool is not None:
        return True
    workers = min(jobs, os.cpu_count() or 1, 16)
    if workers < 2 or "fork" not in mp.get_all_start_methods():
        return False
    upload.pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"))
    return True


def submit(upload: Upload, fn, *args) -> Future:
    """Run fn(*args) on a worker; fn reads the upload through `forked()`. The workers fork
    at the first submit (ProcessPoolExecutor with fork launches them all then), with the
    upload as loaded."""
    _FORKED[:] = [upload]
    try:
        return upload.pool.submit(fn, *args)
    finally:
        _FORKED.clear()               # the workers hold their own copy (forked)


def forked() -> Upload:
    """In a worker: the upload it inherited."""
    return _FORKED[0]


def stop(upload: Upload) -> None:
    """Shut the workers down (the audit ended); work not started is cancelled."""
    if upload.pool is not None:
        pool, upload.pool = upload.pool, None
        pool.shutdown(cancel_futures=True)
