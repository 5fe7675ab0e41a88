"""Conventions of harness/ and backends/ that the import-linter cannot see, checked on the AST
(docs/architecture.md "Habits"). One test per rule over the code, and one per rule that feeds
its checker a small offending snippet, so every rule is seen failing:

  a. no string import (importlib.import_module, __import__, runpy, "pkg.mod:attr", `-m mod`)
     outside the registry and the listed launchers/workers;
  b. one YAML reader: harness/io/safeyaml.py (and yamldoc.py, which constructs its scalars);
  c. the pad multiple 128 has one home, harness/vocab.py DEFAULT_PAD_MULTIPLE;
  d. no private name (`_name`) imported from another module;
  e. no backend imports or names `Purpose` (backends receive decisions, not purposes);
  f. every reader of outside data goes through a boundary (harness/io/: safeio, the
     boundary/ modules): no bare open() for reading, Path.read_text/read_bytes, json.load(s)
     or subprocess call elsewhere in harness/, except the listed ones, each with its reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("harness", "backends")


def sources() -> Iterator[tuple[str, str]]:
    """(repository-relative path, text) of every Python module under harness/ and backends/."""
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def module_of(path: str) -> str:
    """'harness/io/yamldoc.py' -> 'harness.io.yamldoc'; a package's __init__ is the package."""
    return ".".join(Path(path).with_suffix("").parts).removesuffix(".__init__")


def imported_from(path: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads (relative imports resolved against `path`)."""
    if not node.level:
        return node.module or ""
    package = module_of(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def module_names(tree: ast.AST, path: str) -> set[str]:
    """Local names bound to one of our modules: `import harness.x.y as m`, `from
    harness.telemetry import lines` -- so `m._name` is seen as reaching into it. (The standard
    library's own underscored API, `os._exit`, is not ours to judge.)"""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.split(".")[0] in SCANNED}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(path, node).replace(".", "/")
            for a in node.names:
                if (ROOT / base / f"{a.name}.py").is_file() or (ROOT / base / a.name).is_dir():
                    names.add(a.asname or a.name)
    return names


# ---- a. string imports ----------------------------------------------------------------------

DOTTED_TARGET = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+:[A-Za-z_]\w*$")   # "pkg.mod:attr"
IMPORT_CALLS = {"importlib.import_module", "import_module", "__import__",
                "runpy.run_module", "runpy.run_path", "pkgutil.resolve_name",
                "importlib.util.spec_from_file_location"}

# (file, what): why a module is reached by name there. Everything else imports it as code.
STRING_IMPORTS_ALLOWED = {
    ("harness/audit/versions.py", "-m CLI_MODULE"):
        "an earlier epcap commit's own `epcap audit`, run from its checkout (its code, not ours)",
    ("harness/api/registry.py", "importlib.import_module"):
        "the registry: the one table from a runbook backend/launcher name to its module",
    ("harness/api/registry.py", "'harness.launch.local:LocalLauncher'"):
        "the registry's launcher table (module:Class)",
    ("harness/api/registry.py", "'harness.launch.slurm:SlurmLauncher'"):
        "the registry's launcher table (module:Class)",
    ("harness/launch/forkserver.py", "importlib.import_module"):
        "the fork server preloads the modules its children will run (heavy imports once)",
    ("harness/launch/forkserver.py", "runpy.run_module"):
        "a forked child runs `python -m <module>` in-process, as the argv asked",
    ("harness/launch/forkserver.py", "-m harness.launch.forkserver"):
        "the local launcher starts its fork server as a process",
    ("harness/launch/slurm_script.py", "-m harness.health"):
        "the batch script runs the pre-cell GPU health probe on the node",
    ("harness/launch/local.py", "-m harness.launch.capture"):
        "the local launcher starts each rank's redacting capture",
    ("harness/launch/slurm_script.py", "-m harness.launch.capture"):
        "the batch script pipes the ranks' output through the redacting capture",
    ("backends/reference/adapter.py", "-m backends.reference"):
        "the reference backend's launch argv starts its worker",
    ("backends/reference/__main__.py", "-m backends.reference"):
        "the reference worker forks one process per rank",
    ("backends/megatron_core/adapter.py", "-m WORKER"):
        "the megatron-core backend's launch argv starts its worker (WORKER names it)",
    ("backends/megatron_core/worker.py", "-m backends.megatron_core.worker"):
        "the megatron-core worker forks one process per rank",
}


def dotted(node: ast.AST) -> str:
    """'importlib.import_module' for that call target; '' for anything not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def string_imports(path: str, text: str) -> list[tuple[int, str]]:
    """(line, what) of every module reached by name: import calls, "pkg.mod:attr" strings,
    and `-m <module>` in an argv list."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and dotted(node.func) in IMPORT_CALLS:
            out.append((node.lineno, dotted(node.func)))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and DOTTED_TARGET.match(node.value)):
            out.append((node.lineno, repr(node.value)))
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            for i, item in enumerate(items[:-1]):
                if isinstance(item, ast.Constant) and item.value == "-m":
                    nxt = items[i + 1]
                    name = nxt.value if isinstance(nxt, ast.Constant) else ast.unparse(nxt)
                    out.append((item.lineno, f"-m {name}"))
    return out


# ---- b. one YAML reader ---------------------------------------------------------------------

YAML_READERS = {"safe_load", "load", "compose", "full_load", "unsafe_load", "load_all",
                "safe_load_all", "compose_all", "full_load_all", "unsafe_load_all", "parse",
                "scan"}
YAML_READER_HOMES = {
    "harness/io/safeyaml.py": "the one YAML reader: bounded depth, size and aliases",
    "harness/io/yamldoc.py": "builds a Doc (values + lines) over safeyaml.compose's node graph",
}


def yaml_reads(path: str, text: str) -> list[tuple[int, str]]:
    """(line, call) of every direct PyYAML read: yaml.<reader>(...) or a reader imported
    from yaml."""
    out, aliases = [], {}
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "yaml":
            aliases |= {a.asname or a.name: a.name for a in node.names if a.name in YAML_READERS}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name.startswith("yaml.") and name[5:] in YAML_READERS:
            out.append((node.lineno, name))
        elif name in aliases:
            out.append((node.lineno, f"yaml.{aliases[name]}"))
    return out


# ---- c. the pad multiple --------------------------------------------------------------------

PAD_HOME = "harness/vocab.py"
# (file, the line's text, stripped): why that 128 is not a pad multiple.
LITERAL_128_ALLOWED = {
    ("harness/taxonomy/timeline.py",
     "SHELL_SIGNAL_BASE = 128   # a shell reports a child ended by signal n as exit 128 + n"):
        "the shell's exit status of a process ended by a signal (128 + signum)",
    ("harness/launch/slurm_script.py",
     "SHELL_SIGNAL_BASE = 128   # a shell reports a child ended by signal n as exit 128 + n"):
        "the shell's exit status of a process ended by a signal (128 + signum): a step's rc",
    ("harness/campaign/cli.py", "return 128 + exc.signum"):
        "the shell's exit status of a process ended by a signal (128 + signum)",
    ("harness/timing/traffic.py",
     "FP8_SCALE_CHANNELS = 128              # one fp32 scale per 128 channels (DeepEP's fp8 cast)"):
        "fp8 rows carry one fp32 scale per 128 channels (DeepEP's per_token_cast_to_fp8)",
}


def literal_128(path: str, text: str) -> list[tuple[int, str]]:
    """(line, stripped line) of every integer literal 128."""
    lines = text.splitlines()
    return sorted((node.lineno, lines[node.lineno - 1].strip())
                  for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.Constant) and type(node.value) is int
                  and node.value == 128)


# ---- d. private names -----------------------------------------------------------------------



def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: str, text: str) -> list[tuple[int, str]]:
    """(line, 'module._name') for every private name taken from another module: `from m
    import _x` (absolute or relative) or `m._x` on a module imported by name. A package's
    private submodule (harness/telemetry/_scan) may be imported inside its own package."""
    out = []
    tree = ast.parse(text)
    here = module_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = imported_from(path, node)
            for alias in node.names:
                if not is_private(alias.name) or source == here:
                    continue
                base = ROOT / source.replace(".", "/")
                submodule = any(base.glob(f"{alias.name}.*")) or (base / alias.name).is_dir()
                if submodule and (here + ".").startswith(source + "."):
                    continue
                out.append((node.lineno, f"{source}.{alias.name}"))
    modules = module_names(tree, path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and is_private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return out


# ---- e. purposes in backends ----------------------------------------------------------------

def purpose_uses(path: str, text: str) -> list[tuple[int, str]]:
    """(line, how) wherever a backend module imports or names `Purpose`."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and any(a.name == "Purpose" for a in node.names):
            out.append((node.lineno, f"from {node.module} import Purpose"))
        elif isinstance(node, ast.Name) and node.id == "Purpose":
            out.append((node.lineno, "Purpose"))
        elif isinstance(node, ast.Attribute) and node.attr == "Purpose":
            out.append((node.lineno, ast.unparse(node)))
    return out


# ---- f. readers go through a boundary ------------------------------------------------------

BOUNDARY_HOME = "harness/io/"
READ_METHODS = {"read_text", "read_bytes"}
JSON_READS = {"json.loads", "json.load"}
TOOL_CALLS = {"subprocess.run", "subprocess.check_output", "subprocess.Popen",
              "subprocess.check_call", "subprocess.call"}
# (file, what): why that read needs no boundary. Everything else reads through harness/io.
READERS_ALLOWED = {
    ("harness/audit/versions.py", "json.loads"):
        "the JSON document an earlier epcap commit's own `epcap audit --json` printed "
        "(run through boundary.tools: decoded, size-capped)",
    ("harness/audit/evidence.py", "open"):
        "hashes the files evidence_manifest listed (regular files inside the results directory)",
    ("harness/audit/rules/signature.py", "open"):
        "hashes the files evidence_manifest (or publish's local_files) listed: regular files "
        "inside the upload, in blocks",
    ("harness/launch/container.py", "subprocess.run"):
        "`srun --help`, the pyxis probe (a Slurm client: to move onto io.boundary.tools with "
        "slurm.py's)",
    ("harness/api/backend.py", "json.loads"):
        "a timing object inside a log line the bounded log reader already cut",
    ("harness/audit/load.py", "read_bytes"):
        "the harness's own shipped models.yaml (its sha256), not user input",
    ("harness/audit/readers.py", "open"):
        "opens only what safe_real / lfs_pointer checked: a regular file inside TARGET",
    ("harness/audit/readers.py", "read_bytes"):
        "hashes logs whose sizes were summed under SMALL_LOGS_BYTES first",
    ("harness/campaign/state.py", "json.loads"):
        "the lock's holder note, read with os.pread of at most 4 KiB (never blocks)",
    ("harness/campaign/store.py", "json.loads"):
        "bytes from safeio.read_bytes (cell.json), or a round trip of our own value",
    ("harness/launch/capture.py", "open"):
        "the rank's own FIFO, created by the launcher for this capture",
    ("harness/launch/container.py", "open"):
        "hashes a container image the runbook names, after a size limit check",
    ("harness/launch/forkserver.py", "subprocess.Popen"):
        "starts the launcher's own fork server (a child, not a tool's output)",
    ("harness/launch/forkserver.py", "json.loads"):
        "the fork server's own line protocol with its parent",
    ("harness/launch/local.py", "subprocess.Popen"):
        "starts the ranks and their captures (children, not a tool's output)",
    ("harness/launch/local.py", "read_bytes"):
        "/proc/<pid>/environ of our own process groups (kernel-bounded)",
    ("harness/launch/slurm.py", "open"):
        "the tail of a Slurm output file (seeks to the last 256 KiB)",
    ("harness/launch/slurm.py", "json.loads"):
        "the cell's own job note written by this launcher",
    ("harness/launch/slurm.py", "read_text"):
        "the launcher's own job note and health logs in the cell directory",
    ("harness/launch/slurm_script.py", "read_text"):
        "the batch script this module wrote",
    ("harness/launch/slurm_script.py", "json.loads"):
        "the metadata line this module wrote into that script",
    ("harness/publish/__init__.py", "open"):
        "scans files local_files listed (regular, not links) block by block",
    ("harness/publish/__init__.py", "read_bytes"):
        "the campaign's own small TSVs (regular, not links) for the run id",
    ("harness/results/provenance.py", "read_text"):
        "an installed package's version.py / a header under the install (first 64 KiB)",
    ("harness/results/tables.py", "read_text"):
        "compares a TSV epcap is about to rewrite with what it would write",
}


def _open_mode(call: ast.Call) -> str:
    """The mode of an open() call ('r' when not given)."""
    if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
        return str(call.args[1].value)
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    return "r"


def outside_reads(path: str, text: str) -> list[tuple[int, str]]:
    """(line, what) of every read that does not go through harness/io: open() for reading,
    Path.read_text/read_bytes, json.load(s), subprocess calls."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name == "open" and not any(c in _open_mode(node) for c in "wax+"):
            out.append((node.lineno, "open"))
        elif isinstance(node.func, ast.Attribute) and node.func.attr in READ_METHODS:
            out.append((node.lineno, node.func.attr))
        elif name in JSON_READS or name in TOOL_CALLS:
            out.append((node.lineno, name))
    return out


def report(found: list[tuple[str, int, str]]) -> str:
    return "\n".join(f"{path}:{line}: {what}" for path, line, what in found)


# ---- the rules over the code ----------------------------------------------------------------

def test_a_no_string_import_outside_the_registry():
    found = [(p, line, what) for p, text in sources()
             for line, what in string_imports(p, text) if (p, what) not in STRING_IMPORTS_ALLOWED]
    assert not found, ("import the module as code, or add the name to the registry "
                       "(harness/api/registry.py):\n" + report(found))
    seen = {(p, what) for p, text in sources() for _, what in string_imports(p, text)}
    assert set(STRING_IMPORTS_ALLOWED) <= seen, sorted(set(STRING_IMPORTS_ALLOWED) - seen)


def test_b_one_yaml_reader():
    found = [(p, line, what) for p, text in sources() if p not in YAML_READER_HOMES
             for line, what in yaml_reads(p, text)]
    assert not found, ("read YAML through harness.io.yamldoc (Doc / read_doc), bounded by "
                       "harness.io.safeyaml:\n" + report(found))


def test_c_pad_multiple_has_one_home():
    from harness.vocab import DEFAULT_PAD_MULTIPLE

    assert DEFAULT_PAD_MULTIPLE == 128
    found = [(p, line, what) for p, text in sources() if p != PAD_HOME
             for line, what in literal_128(p, text) if (p, what) not in LITERAL_128_ALLOWED]
    assert not found, "use harness.vocab.DEFAULT_PAD_MULTIPLE:\n" + report(found)
    home = dict(sources())[PAD_HOME]
    assert [w.split("#")[0].strip() for _, w in literal_128(PAD_HOME, home)] == [
        "DEFAULT_PAD_MULTIPLE = 128"]
    seen = {(p, what) for p, text in sources() for _, what in literal_128(p, text)}
    assert set(LITERAL_128_ALLOWED) <= seen, sorted(set(LITERAL_128_ALLOWED) - seen)


def test_d_no_private_name_imported_from_another_module():
    found = [(p, line, what) for p, text in sources() for line, what in private_imports(p, text)]
    assert not found, ("make the name public in the module that owns it, or move it there:\n"
                       + report(found))


def test_e_no_purpose_in_backends():
    found = [(p, line, what) for p, text in sources() if p.startswith("backends/")
             for line, what in purpose_uses(p, text)]
    assert not found, ("a backend reads the decisions on RunRequest (seed, timed, "
                       "record_routing, phase), never the purpose:\n" + report(found))


# ---- each rule seen failing on an offending snippet -----------------------------------------

def test_a_catches_string_imports():
    snippet = ("import importlib, runpy, subprocess, sys\n"
               "m = importlib.import_module('backends.reference')\n"
               "n = __import__('json')\n"
               "TARGET = 'harness.forecast.core:Forecaster'\n"
               "subprocess.run([sys.executable, '-m', 'backends.reference'])\n"
               "runpy.run_module('harness.health')\n"
               "NOT_A_TARGET = 'ultra_ep.cpp:909'\n")
    assert sorted(string_imports("harness/report/x.py", snippet)) == [
        (2, "importlib.import_module"), (3, "__import__"),
        (4, "'harness.forecast.core:Forecaster'"), (5, "-m backends.reference"),
        (6, "runpy.run_module")]
    assert ("harness/report/x.py", "importlib.import_module") not in STRING_IMPORTS_ALLOWED


def test_b_catches_yaml_reads():
    snippet = ("import yaml\n"
               "from yaml import safe_load as sl\n"
               "a = yaml.safe_load(open('x'))\n"
               "b = yaml.compose('x: 1', Loader=yaml.SafeLoader)\n"
               "c = sl('x: 1')\n"
               "d = yaml.full_load('x'); e = yaml.load('x', yaml.Loader)\n"
               "f = yaml.unsafe_load('x')\n"
               "ok = yaml.safe_dump({})\n")
    assert sorted(yaml_reads("harness/audit/x.py", snippet)) == [
        (3, "yaml.safe_load"), (4, "yaml.compose"), (5, "yaml.safe_load"),
        (6, "yaml.full_load"), (6, "yaml.load"), (7, "yaml.unsafe_load")]


def test_c_catches_a_spelt_pad_multiple():
    snippet = ("import click\n"
               "def f(pad_multiple: int = 128): ...\n"
               "@click.option('--pad-multiple', default=128)\n"
               "def g(): return 'exits 128 + signum', 128.0, 0x80\n")
    assert literal_128("harness/grid/x.py", snippet) == [
        (2, "def f(pad_multiple: int = 128): ..."),
        (3, "@click.option('--pad-multiple', default=128)"),
        (4, "def g(): return 'exits 128 + signum', 128.0, 0x80")]


def test_d_catches_private_imports():
    snippet = ("from harness.telemetry.lines import _Tags, make_tags\n"
               "from .lines import _unterminated\n"
               "from harness.io.yamldoc import Doc as _Doc\n"
               "from harness.telemetry import lines\n"
               "import harness.grid.capacity as cap\n"
               "x = lines._sorted_unique(cap._budget_of(1, 2, 3))\n"
               "from harness.telemetry import _scan\n"
               "y = self._private + __name__.__len__()\n")
    assert sorted(private_imports("harness/telemetry/summary.py", snippet)) == [
        (1, "harness.telemetry.lines._Tags"), (2, "harness.telemetry.lines._unterminated"),
        (6, "cap._budget_of"), (6, "lines._sorted_unique")]
    # a private submodule is private to its package, not to the other rooms
    assert private_imports("harness/report/x.py", "from harness.telemetry import _scan\n") == [
        (1, "harness.telemetry._scan")]


def test_e_catches_purposes_in_backends():
    snippet = ("from harness.vocab import Purpose, Status\n"
               "import harness.vocab as v\n"
               "def f(req):\n"
               "    if req.cell.purpose == Purpose.MEASURE or v.Purpose.TIME: ...\n"
               "    return req.record_routing\n")
    assert sorted(purpose_uses("backends/x.py", snippet)) == [
        (1, "from harness.vocab import Purpose"), (4, "Purpose"), (4, "v.Purpose")]


def test_f_readers_go_through_a_boundary():
    found = [(p, line, what) for p, text in sources()
             if p.startswith("harness/") and not p.startswith(BOUNDARY_HOME)
             for line, what in outside_reads(p, text) if (p, what) not in READERS_ALLOWED]
    assert not found, ("read through harness/io (safeio, boundary.logs, boundary.events, "
                       "boundary.tools, ...), or list the read with its reason:\n"
                       + report(found))
    seen = {(p, what) for p, text in sources() for _, what in outside_reads(p, text)}
    assert set(READERS_ALLOWED) <= seen, sorted(set(READERS_ALLOWED) - seen)


def test_f_catches_outside_reads():
    snippet = ("import json, subprocess\n"
               "from pathlib import Path\n"
               "a = open('x').read()\n"
               "b = open('x', 'rb')\n"
               "c = Path('x').read_text()\n"
               "d = json.loads(Path('x').read_bytes())\n"
               "e = subprocess.run(['git', 'status'], capture_output=True)\n"
               "ok = open('y', 'w'), open('z', mode='ab')\n")
    assert sorted(outside_reads("harness/report/x.py", snippet)) == [
        (3, "open"), (4, "open"), (5, "read_text"), (6, "json.loads"), (6, "read_bytes"),
        (7, "subprocess.run")]
    assert ("harness/report/x.py", "open") not in READERS_ALLOWED
