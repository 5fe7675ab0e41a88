"""Every example in README.md and docs/ runs as written: each fenced block is run (``sh``:
the commands, in a sandbox holding `.venv`, `runbooks/` and nothing else; ``yaml``: a
runbook, saved where its first line says and dry-run, its canaries run, every pair fitting;
a fragment, merged into the runbook its first line names and loaded), unless the line just
before it says why it is not run here (`*(not run by the doc test: REASON)*`: cluster only,
installs packages, ...). Indented blocks are synopses and layouts, not examples."""

from __future__ import annotations

import re

import docrun
import pytest
import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.runbook.load import load_runbook

ROOT = docrun.ROOT
SAVE_AS = re.compile(r"^# save as (\S+)")
FRAGMENT_OF = re.compile(r"^# fragment of (\S+)")
RUNNABLE = ("sh", "yaml")
examples, sandbox = docrun.examples, docrun.sandbox


def runnable(kind: str) -> list:
    return [pytest.param(e, id=f"{e[0]}:{e[1]}") for e in examples()
            if e[2] == kind and e[4] is None]


def test_every_example_is_run_or_says_why_not():
    found = examples()
    assert len(found) >= 6
    for doc, line, lang, body, why in found:
        if why is not None:
            assert len(why.strip()) > 10, f"{doc}:{line}: say why it is not run"
            continue
        assert lang in RUNNABLE, f"{doc}:{line}: ```{lang}: run it (sh, yaml) or mark it " \
                                 "*(not run by the doc test: REASON)*"
        if lang == "yaml":
            first = body.splitlines()[0]
            assert SAVE_AS.match(first) or FRAGMENT_OF.match(first), \
                f"{doc}:{line}: a runbook says `# save as PATH`, a fragment `# fragment of PATH`"


@pytest.mark.parametrize("example", runnable("yaml"))
def test_yaml_example_runs_as_written(example, tmp_path, monkeypatch):
    doc, line, _, body, _ = example
    box = sandbox(tmp_path)
    first = body.splitlines()[0]
    fragment = FRAGMENT_OF.match(first)
    if fragment:
        base = yaml.safe_load((box / fragment.group(1)).read_text())
        base.update(yaml.safe_load(body))
        path = box / fragment.group(1)
        path.write_text(yaml.safe_dump(base))
        load_runbook(path)
        return
    path = box / SAVE_AS.match(first).group(1)
    path.write_text(body)
    monkeypatch.chdir(box)
    load_runbook(path)
    dry = CliRunner().invoke(main, ["run", str(path), "--dry-run", "--results", "results"])
    assert dry.exit_code == 0, f"{doc}:{line}: {dry.output}"
    assert "WARNING" not in dry.output, f"{doc}:{line}: {dry.output}"
    res = CliRunner().invoke(main, ["run", str(path), "--results", "results",
                                    "--until", "preflight"])
    assert res.exit_code == 0, f"{doc}:{line}: {res.output}"
    assert "does_not_fit" not in res.output, f"{doc}:{line}: {res.output}"


@pytest.mark.slow
@pytest.mark.parametrize("example", runnable("sh"))
def test_shell_example_runs_as_written(example, tmp_path, request):
    """README's first session runs once per suite (the readme_first_session fixture, whose
    campaign the default-campaign tests read); every other block runs here."""
    doc, line, _, body, _ = example
    if example == docrun.first_session():
        _, res, _ = request.getfixturevalue("readme_first_session")
    else:
        res = docrun.run_shell(body, sandbox(tmp_path))
    assert res.returncode == 0, f"{doc}:{line}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
