"""Read the command-line flags a Megatron-LM checkout accepts, statically (ast, no import).

Megatron-LM defines its flags two ways in megatron/training/arguments.py: plain
`parser.add_argument(...)` calls, and `ArgumentGroupFactory(SomeConfig, exclude=[...])`, which
turns every dataclass field of SomeConfig (bases included) into `--field-name` (a bool field
whose default is not False becomes `--no-field-name` / `--disable-field-name`; a Literal gives
the choices; an Enum its member names; `metadata={"argparse_meta": {"arg_names": [...]}}`
overrides the name). This module mirrors those rules on the source text of one commit.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ARGUMENTS_FILE = "megatron/training/arguments.py"
NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "count", "help", "version")


@dataclass
class Source:
    """Text of the files of one commit: a git directory (+ commit) or a plain checkout."""

    root: str
    commit: str | None = None
    _cache: dict[str, str | None] = field(default_factory=dict)

    def read(self, path: str) -> str | None:
        """The file's text, or None when the commit has no such file."""
        if path not in self._cache:
            if self.commit:
                proc = subprocess.run(["git", "-C", self.root, "show", f"{self.commit}:{path}"],
                                      capture_output=True, text=True, check=False)
                self._cache[path] = proc.stdout if proc.returncode == 0 else None
            else:
                p = Path(self.root) / path
                self._cache[path] = p.read_text(encoding="utf-8") if p.is_file() else None
        return self._cache[path]

    def files_defining(self, name: str) -> list[str]:
        """Python files under megatron/ that contain `class <name>`."""
        if self.commit:
            proc = subprocess.run(["git", "-C", self.root, "grep", "-l", "-E",
                                   rf"^\s*class {name}\b", self.commit, "--", "megatron"],
                                  capture_output=True, text=True, check=False)
            return sorted(line.split(":", 1)[1] for line in proc.stdout.splitlines()
                          if line.endswith(".py"))
        out = []
        for p in sorted((Path(self.root) / "megatron").rglob("*.py")):
            if f"class {name}" in p.read_text(encoding="utf-8", errors="replace"):
                out.append(str(p.relative_to(self.root)))
        return out


def _const_list(node: ast.AST | None) -> list | None:
    """A literal list/tuple of constants as a Python list, else None."""
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant)
                                                       for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_boolean_optional(action: ast.AST | None) -> bool:
    """`action=argparse.BooleanOptionalAction` (an attribute or a bare name, not a string):
    the flag takes no value and argparse also defines `--no-<flag>`."""
    name = action.attr if isinstance(action, ast.Attribute) else getattr(action, "id", None)
    return name == "BooleanOptionalAction"


def _negated(flags: list[str]) -> list[str]:
    """The `--no-x` twins argparse's BooleanOptionalAction adds for each `--x`."""
    return [f"--no-{f[2:]}" for f in flags if f.startswith("--")]


def _value_kind(action: object, nargs: object) -> str:
    """How many values a flag takes: none | one | optional | many."""
    if action in NO_VALUE_ACTIONS:
        return "none"
    if nargs in ("?",):
        return "optional"
    if nargs in ("+", "*") or isinstance(nargs, int) and nargs != 1:
        return "many"
    return "one"


def _entry(path: str, line: int, kind: str, choices: list | None, how: str) -> dict:
    return {"file": path, "line": line, "value": kind,
            "choices": None if choices is None else [str(c) for c in choices], "via": how}


class Extractor:
    """Collects {flag: entry} for one Source."""

    def __init__(self, source: Source) -> None:
        self.src = source
        self.flags: dict[str, dict] = {}
        self.files: set[str] = set()
        self.unresolved: list[str] = []

    def run(self, path: str = ARGUMENTS_FILE) -> dict[str, dict]:
        text = self.src.read(path)
        if text is None:
            raise FileNotFoundError(f"{path} not found in {self.src.root}@{self.src.commit}")
        self.files.add(path)
        tree = ast.parse(text)
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.Module)):
                lists = self._local_lists(func)
                for node in ast.walk(func):
                    if isinstance(node, ast.Call):
                        self._call(node, path, lists)
        return self.flags

    @staticmethod
    def _local_lists(func: ast.AST) -> dict[str, list]:
        """Names bound to literal lists in a function body (`exclude = [...]`, `+= [...]`)."""
        out: dict[str, list] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name):
                vals = _const_list(node.value)
                if vals is not None:
                    out[node.targets[0].id] = vals
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                vals = _const_list(node.value)
                if vals is not None and node.target.id in out:
                    out[node.target.id] += vals
        return out

    def _call(self, node: ast.Call, path: str, lists: dict[str, list]) -> None:
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        if name == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str) and a.value.startswith("-")]
            action = _kw(node, "action")
            nargs = _kw(node, "nargs")
            kind = _value_kind(action.value if isinstance(action, ast.Constant) else None,
                               nargs.value if isinstance(nargs, ast.Constant) else None)
            choices = _const_list(_kw(node, "choices"))
            if _is_boolean_optional(action):
                kind, flags = "none", flags + _negated(flags)
            for f in flags:
                self.flags.setdefault(f, _entry(path, node.lineno, kind, choices, "add_argument"))
        elif name == "ArgumentGroupFactory" and node.args and isinstance(node.args[0], ast.Name):
            exc = _kw(node, "exclude")
            excluded = _const_list(exc)
            if excluded is None and isinstance(exc, ast.Name):
                excluded = lists.get(exc.id)
            if excluded is None and exc is not None:
                self.unresolved.append(f"{path}:{node.lineno}: exclude list not literal")
            self.dataclass_flags(node.args[0].id, set(excluded or ()))

    def find_class(self, name: str) -> tuple[str, ast.ClassDef] | None:
        for path in self.src.files_defining(name):
            tree = ast.parse(self.src.read(path) or "")
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return path, node
        return None

    def enum_members(self, name: str) -> list[str] | None:
        found = self.find_class(name)
        if found is None:
            return None
        _, cls = found
        return [t.id for n in cls.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)]

    def dataclass_flags(self, name: str, exclude: set[str]) -> None:
        """Flags of every field of dataclass `name` and its bases, as ArgumentGroupFactory."""
        found = self.find_class(name)
        if found is None:
            self.unresolved.append(f"class {name} not found")
            return
        path, cls = found
        self.files.add(path)
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id not in ("object",):
                self.dataclass_flags(base.id, exclude)
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id not in exclude and not node.target.id.startswith("_"):
                self._field(node, path)

    def _field(self, node: ast.AnnAssign, path: str) -> None:
        attr, value = node.target.id, node.value
        ann = ast.unparse(node.annotation)
        if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            return
        default, meta = value, None
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
            init = _kw(value, "init")
            if isinstance(init, ast.Constant) and init.value is False:
                return
            default = _kw(value, "default")
            md = _kw(value, "metadata")
            if isinstance(md, ast.Dict):
                for k, v in zip(md.keys, md.values, strict=False):
                    if isinstance(k, ast.Constant) and k.value == "argparse_meta" and \
                            isinstance(v, ast.Dict):
                        meta = {kk.value: vv for kk, vv in zip(v.keys, v.values, strict=False)
                                if isinstance(kk, ast.Constant)}
        kind, choices = self._annotation(node.annotation)
        names = ["--" + attr.replace("_", "-")]
        if kind == "bool":
            is_false = isinstance(default, ast.Constant) and default.value is False
            kind = "none"
            if not is_false:
                names = ["--no-" + attr.replace("_", "-"), "--disable-" + attr.replace("_", "-")]
        if meta:
            arg_names = _const_list(meta.get("arg_names"))
            if arg_names:
                names = [str(n) for n in arg_names]
            act, nargs = meta.get("action"), meta.get("nargs")
            if _is_boolean_optional(act):
                kind, names = "none", names + _negated(names)
            elif act is not None or nargs is not None:
                kind = _value_kind(getattr(act, "value", None), getattr(nargs, "value", None))
            if "choices" in meta:
                choices = _const_list(meta["choices"])
        for n in names:
            self.flags.setdefault(n, _entry(path, node.lineno, kind, choices,
                                            "ArgumentGroupFactory"))

    def _annotation(self, ann: ast.AST) -> tuple[str, list | None]:
        """(value kind, choices) of a field's type, as ArgumentGroupFactory._extract_type."""
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            ann = ast.parse(ann.value, mode="eval").body
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):       # X | None
            side = ann.right if ast.unparse(ann.left) == "None" else ann.left
            return self._annotation(side)
        if isinstance(ann, ast.Subscript):
            head = ast.unparse(ann.value).split(".")[-1]
            inner = ann.slice
            if head == "Optional":
                return self._annotation(inner)
            if head == "Union" and isinstance(inner, ast.Tuple) and len(inner.elts) == 2 and \
                    ast.unparse(inner.elts[1]) == "None":
                return self._annotation(inner.elts[0])
            if head == "Literal":
                elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                return "one", [e.value for e in elts if isinstance(e, ast.Constant)]
            if head in ("list", "List"):
                return "many", self._annotation(inner)[1]
            return "one", None
        text = ast.unparse(ann)
        if text == "bool":
            return "bool", None
        if text in ("int", "float", "str", "Path", "torch.dtype"):
            return "one", None
        members = self.enum_members(text.split(".")[-1]) if text[:1].isupper() else None
        return "one", members


def extract(source: Source) -> tuple[dict[str, dict], list[str], list[str]]:
    """(flags, files read, unresolved notes) for one commit or checkout."""
    ex = Extractor(source)
    ex.run()
    return ex.flags, sorted(ex.files), ex.unresolved


def git_commit(root: str, ref: str, run: Callable = subprocess.run) -> str:
    """The full commit id of `ref` in the git directory `root`."""
    proc = run(["git", "-C", root, "rev-parse", f"{ref}^{{commit}}"], capture_output=True,
               text=True, check=True)
    return proc.stdout.strip()
