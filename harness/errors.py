"""Errors shared across the harness, each mapped to a CLI exit code (docs/spec.md: command line)."""

from __future__ import annotations


class EpcapError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 2


class BadInput(EpcapError):
    """Bad input or usage: the message names the file, line and field (exit 2)."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        if field is not None:
            where += f"{field}: "
        super().__init__(where + message)
        self.path, self.line, self.field = path, line, field


class Findings(EpcapError):
    """The command ran but found problems (audit --strict, failed validation): exit 1."""

    exit_code = 1


class CampaignStopped(EpcapError):
    """The campaign stopped on a bug-class failure (assert/badflag): exit 3."""

    exit_code = 3
