"""Make the uploads of tests/fixtures/uploads/versions/: one small campaign per epcap commit,
run by that commit's own code.

For each commit: a clone of this repository checked out (detached) at the commit in a temp
directory (a git checkout, so its provenance records the real `harness.commit` and date),
that commit's own `tests/fixtures/runbooks/reduced.yaml` cut the way
`tests/fixtures/uploads/corpus.py` `short_runbook_text` cuts it (no timed-only backend, one
timing launch; paths made absolute, pointing at the clone), run there with that commit's
`python -m harness.cli run` (no EPCAP_REQUIRE_COMPILED: an old commit may lack the compiled
scanner), stopped after its time stage (`--until time`: the report is no evidence), and the
campaign directory copied to `tests/fixtures/uploads/versions/<short sha>/` without its
measure cells' `routing_trace.jsonl` (not an evidence file, harness/audit/evidence.py: an
hf:// audit never fetches it, and it is most of a campaign's bytes).

    .venv/bin/python scripts/make_version_uploads.py [COMMIT ...]

The default commits are VERSION_COMMITS. Nothing else is left out: the audit reads every
other file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "uploads" / "versions"
VERSION_COMMITS = ("6f93e2d", "7e6eb72", "a6e7b91")
RUN_TIMEOUT_S = 900
LEFT_OUT = ("routing_trace.jsonl",)


def git(*args: str, cwd: Path = REPO) -> str:
    """stdout of a git command (argv list, never a shell)."""
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def short_runbook(text: str, checkout: str) -> str:
    """corpus.short_runbook_text's cut, applied to a commit's own reduced runbook, its paths
    relative to the runbook's folder (`checkout` there): the campaign freezes the zoo beside
    its runbook.yaml at that relative path, so the upload loads without the checkout."""
    text = "\n".join(line for line in text.splitlines() if "name: moonep" not in line) + "\n"
    text = text.replace("launches: 2}", "launches: 1}")
    text = text.replace("../../../runbooks/models.yaml", f"{checkout}/runbooks/models.yaml")
    return text.replace("{epcap: ../../..}", "{epcap: " + checkout + "}")


def make(commit: str, work: Path) -> Path:
    """Run the short campaign with `commit`'s own code; returns the fixture directory."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    short = sha[:7]
    checkout = work / f"epcap-{short}"
    subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(REPO),
                    str(checkout)], check=True)
    git("checkout", "--quiet", "--detach", sha, cwd=checkout)
    reduced = git("show", f"{sha}:tests/fixtures/runbooks/reduced.yaml")
    runbook = work / f"short-{short}.yaml"
    runbook.write_text(short_runbook(reduced, checkout.name))
    results = work / f"results-{short}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPCAP_REQUIRE_COMPILED", "PYTHONPATH")}
    env["PYTHONPATH"] = str(checkout)
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(runbook),
                          "--results", str(results), "--until", "time"], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    took = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"{short}: epcap run exited {run.returncode}\n"
                         f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    (campaign,) = [p.parent for p in results.rglob("capacity_attempts.tsv")]
    dest = OUT / short
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(campaign, dest, ignore=shutil.ignore_patterns(*LEFT_OUT))
    print(f"{short}: {took:.1f} s, {sum(f.stat().st_size for f in dest.rglob('*') if f.is_file())}"
          f" bytes -> {dest.relative_to(REPO)}")
    return dest


def main(argv: list[str]) -> None:
    commits = argv or list(VERSION_COMMITS)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="epcap-versions-") as tmp:
        for commit in commits:
            make(commit, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
