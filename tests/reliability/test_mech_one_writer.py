"""Mechanism: one writer (harness.io.outdir) for every command that writes a folder or file
(report, audit --out, forecast --out): the output folder is opened once with O_NOFOLLOW and
every file is created and renamed through that fd, so a link at the folder or file name is
refused and a folder swapped for a link after it was opened sends nothing outside; a
SIGTERMed report unwinds and leaves no temp file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.io.atomic import TEMP_NAME, write_text_atomic
from harness.io.outdir import OutDir
from harness.results.rows import ATTEMPT_COLUMNS

from .conftest import assert_bad_input, run_cli

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "fixtures" / "traces" / "megatron_ep2"
HEALTH = [HealthCheck.function_scoped_fixture]


def mini_campaign(root: Path) -> Path:
    """The smallest folder `epcap report` and `epcap audit` accept: a header-only attempts table."""
    res = root / "res"
    res.mkdir(parents=True, exist_ok=True)
    (res / "capacity_attempts.tsv").write_text("\t".join(ATTEMPT_COLUMNS) + "\n")
    return res


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links not followed) with its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath, name)
            out[str(p.relative_to(folder))] = b"" if p.is_symlink() else p.read_bytes()
    return out


def make_link(at: Path, kind: str, outside: Path) -> None:
    """A link at `at` of one hostile kind, pointing outside the results directory."""
    if kind == "dir":
        at.symlink_to(outside)
    elif kind == "relative-dir":
        at.symlink_to(os.path.relpath(outside, at.parent))
    elif kind == "file":
        at.symlink_to(outside / "victim.txt")
    elif kind == "dangling":
        at.symlink_to(outside / "not-yet")
    elif kind == "chain":
        hop = at.parent / (at.name + ".hop")
        hop.symlink_to(outside)
        at.symlink_to(hop)


COMMANDS = ["report", "report --out", "forecast --out", "audit --out folder", "audit --out file"]
KINDS = ["dir", "relative-dir", "file", "dangling", "chain"]


def run_command(command: str, res: Path, target: Path):
    """`epcap COMMAND` writing at `target` (a link made by the test)."""
    if command == "report":
        return run_cli("report", res)
    if command == "report --out":
        return run_cli("report", res, "--out", target)
    if command == "forecast --out":
        return run_cli("forecast", TRACES / "router_trace_rank0.jsonl",
                       TRACES / "router_trace_rank1.jsonl", "--experts", "8", "--out", target)
    if command == "audit --out folder":
        return run_cli("audit", res, "--out", target / "audit.tsv")
    return run_cli("audit", res, "--out", target)


@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(command=st.sampled_from(COMMANDS), kind=st.sampled_from(KINDS))
def test_a_link_where_a_command_writes_is_refused(tmp_path, command, kind):
    """Catches: a writer that follows a link at its output folder or file (the old
    `mkdir(exist_ok=True)` then open by path wrote report.md into the link's target). Mutant
    tried by hand: O_NOFOLLOW dropped from OutDir.open -> files appear in `outside`."""
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    res = mini_campaign(case)
    outside = case / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    before = snapshot(outside)
    target = res / "report" if command == "report" else case / "out"
    make_link(target, kind, outside)
    res_ = run_command(command, res, target)
    if "Invalid value for '--out'" in res_.err:         # click's own kind check of --out
        assert_bad_input(res_, "--out")                 # (it follows the link: refused there)
    else:
        assert_bad_input(res_, "symbolic link")
    assert snapshot(outside) == before, "a file was written through the link"
    assert not (outside / "not-yet").exists()


def test_a_results_directory_reached_through_a_link_is_the_users_choice(tmp_path):
    """The folders above the output folder are followed: a results directory given through a
    link still gets its report (the refusal is for the output folder itself)."""
    res = mini_campaign(tmp_path)
    (tmp_path / "via").symlink_to(res)
    assert run_cli("report", tmp_path / "via").code == 0
    assert (res / "report" / "report.md").is_file()


NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(
    lambda s: s not in (".", "..") and not TEMP_NAME.fullmatch(s))


@settings(max_examples=60, deadline=None, suppress_health_check=HEALTH)
@given(names=st.lists(NAMES, min_size=1, max_size=8, unique=True), data=st.data())
def test_a_folder_swapped_for_a_link_after_opening_gets_nothing_outside(tmp_path, names, data):
    """Catches: a write that goes by path after the folder was checked (the check-then-write
    race). The folder is renamed away and a link to `outside` put in its place after a
    generated number of writes; every later write must land in the folder first opened.
    Mutant tried by hand: open_atomic(OutFile) writing to str(path) -> files in `outside`."""
    swap_at = data.draw(st.integers(0, len(names)))
    case = Path(tempfile.mkdtemp(dir=os.path.realpath(tmp_path)))
    outside, out = case / "outside", case / "out"
    outside.mkdir()
    with OutDir.open(out) as folder:
        for i, name in enumerate(names):
            if i == swap_at:
                out.rename(case / "moved")
                out.symlink_to(outside)
            write_text_atomic(folder / name, f"{i}\n")
        if swap_at == len(names):
            out.rename(case / "moved")
            out.symlink_to(outside)
        folder.remove_matching("*")
        write_text_atomic(folder / names[0], "last\n")
    assert list(outside.iterdir()) == []
    assert sorted(os.listdir(case / "moved")) == [names[0]]


@settings(max_examples=8, deadline=None, suppress_health_check=HEALTH)
@given(section=st.integers(0, 14))
def test_report_folder_swapped_mid_report_writes_nothing_outside(tmp_path, monkeypatch, section):
    """The real report, its `report` folder swapped for a link to `outside` just before a
    generated section renders: report.md and every later file land in the folder it opened.
    Catches the same race as above through `epcap report` itself."""
    from harness.report import build
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    res = mini_campaign(case)
    outside = case / "outside"
    outside.mkdir()
    target = build.SECTIONS[section]
    real = target.render

    def swap_then_render(ctx):
        if (res / "report").is_dir() and not (res / "report").is_symlink():
            (res / "report").rename(case / "moved")
            (res / "report").symlink_to(outside)
        return real(ctx)

    monkeypatch.setattr(target, "render", swap_then_render)
    assert run_cli("report", res).code == 0
    monkeypatch.undo()
    assert list(outside.iterdir()) == []
    assert (case / "moved" / "report.md").is_file()


def report_sample(root: Path) -> Path:
    """The unit tests' sample campaign (figures drawn: the report runs for seconds)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, 'tests/unit');"
            "from test_report import make_sample; print(make_sample(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120)
    return Path(out.stdout.strip())


@pytest.mark.slow
def test_sigtermed_report_leaves_no_temp_file(tmp_path):
    """A real `epcap report` process SIGTERMed at generated moments across its run (the
    figures are drawn inside open_atomic, so most moments fall inside a write). Catches: no
    SIGTERM handler (the default action kills the process between the temp file's creation
    and its rename, leaving `.fig*.png.XXXXXXXX.tmp`). Mutant tried by hand: term_unwinds
    made a no-op -> temp files left."""
    res = report_sample(tmp_path)
    argv = [sys.executable, "-m", "harness.cli", "report", str(res)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True, timeout=120)
    whole = time.monotonic() - t0
    stopped = 0
    # moments spread over the run (hypothesis would pick them too, at 5 s a run: 3 here)
    for fraction in (0.5, 0.7, 0.9):
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(whole * fraction)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        stopped += code == 143          # SystemExit(143): it unwound
        left = [n for n in os.listdir(res / "report") if TEMP_NAME.fullmatch(n)]
        assert left == [], (fraction, code, left)
    assert stopped, "no run was stopped mid-way: the probe tested nothing"


SPECIAL_KINDS = ["fifo", "char-device", "socket", "directory"]
SPECIAL_COMMANDS = ["audit --out file", "report", "report --out", "forecast --out"]


def make_special(at: Path, kind: str) -> None:
    """A FIFO, a private character device (1, 3: what /dev/null is, made in the test's own
    folder, never /dev's), a bound UNIX socket or a folder at `at`."""
    import socket
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(at)
    elif kind == "char-device":
        os.mknod(at, 0o600 | 0o020000, os.makedev(1, 3))
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(at))
        sock.close()
    else:
        at.mkdir()


@settings(max_examples=16, deadline=None, suppress_health_check=HEALTH)
@given(command=st.sampled_from(SPECIAL_COMMANDS), kind=st.sampled_from(SPECIAL_KINDS))
def test_an_output_path_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, command,
                                                                       kind):
    """Catches rounds23 B18: `epcap audit RES --out X` with X a character device or a FIFO
    renamed a regular 121-byte TSV over it (`--out /dev/null` replaced the machine's
    /dev/null). Every command's output file goes through outdir.open_in, which now refuses
    an existing entry that is not a regular file: exit 2 naming it, the entry left as it was.
    Seen failing on 28ad19d: the FIFO and the device became regular files, rc 0."""
    case = Path(tempfile.mkdtemp(dir=tmp_path))
    res = mini_campaign(case)
    out = case / "out"
    at = {"audit --out file": out / "audit.tsv", "report": res / "report" / "report.md",
          "report --out": out / "report.md", "forecast --out": out / "forecast.tsv"}[command]
    make_special(at, kind)
    kind_before = os.lstat(at).st_mode & 0o170000
    if command == "audit --out file":
        result = run_cli("audit", res, "--out", at)
    elif command == "report":
        result = run_cli("report", res)
    else:
        result = run_command(command, res, out)
    if "Invalid value for '--out'" in result.err:      # click's own kind check (a folder)
        assert_bad_input(result, str(at), "is a directory")
    else:
        assert_bad_input(result, str(at), "not a regular file")
    assert os.lstat(at).st_mode & 0o170000 == kind_before, "the entry was replaced"


def test_the_exact_probe_b18_audit_out_a_device_or_fifo(tmp_path):
    """rounds23 B18 as written (a private device node, never /dev/null itself)."""
    res = mini_campaign(tmp_path)
    make_special(tmp_path / "dev" / "null", "char-device")
    make_special(tmp_path / "dev" / "fifo", "fifo")
    for name in ("null", "fifo"):
        assert_bad_input(run_cli("audit", res, "--out", tmp_path / "dev" / name), name)
    assert not (tmp_path / "dev" / "null").is_file()
    assert not (tmp_path / "dev" / "fifo").is_file()
