"""YAML composition with limits: nesting depth, expanded size and alias cycles.

PyYAML's composer shares aliased nodes, so a "billion laughs" document composes quickly but
explodes when it is walked into Python values, and a recursive alias never ends. `compose`
refuses both, and over-deep nesting, with the line of the offending node (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness.errors import BadInput

MAX_DEPTH = 64            # a runbook nests 4 levels; 64 leaves room for any honest document
MAX_NODES = 200_000       # nodes after alias expansion (a 1 MiB runbook has far fewer)

# libyaml's scanner and composer (PyYAML's CSafeLoader: the same tokens, nodes, tags and line
# marks as the pure-Python SafeLoader, ~10x faster); the pure-Python one where PyYAML was
# built without libyaml. Every runbook, models file and the signature table goes through here.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def compose(text: str, path: str | Path, *, max_depth: int = MAX_DEPTH,
            max_nodes: int = MAX_NODES, quote: bool = True) -> yaml.Node | None:
    """The document's node graph, checked to be a finite tree of bounded size and depth.
    quote=False: a syntax error's message keeps nothing quoted from the text."""
    where = str(path)
    try:
        node = _compose(text, where, max_depth, LOADER)
    except yaml.YAMLError:      # the pure-Python reading decides what is said, and where
        node = _refused(text, where, max_depth, quote)
    if node is not None:
        _check_graph(node, where, max_depth, max_nodes)
    return node


def _compose(text: str, where: str, max_depth: int, loader) -> yaml.Node | None:
    """Scan for depth (before any recursion), then compose, with `loader`."""
    try:
        depth = 0
        for token in yaml.scan(text, Loader=loader):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > max_depth:
                    raise BadInput(f"YAML nested deeper than {max_depth} levels", path=where,
                                   line=token.start_mark.line + 1)
            elif isinstance(token, _CLOSE):
                depth -= 1
        return yaml.compose(text, Loader=loader)
    except RecursionError:
        raise BadInput(f"YAML nested deeper than {max_depth} levels", path=where) from None


def _refused(text: str, where: str, max_depth: int, quote: bool) -> yaml.Node | None:
    """The pure-Python loader's reading of a document libyaml refused: its error at its line
    (libyaml also refuses what the Python loader reads and our checks name by field, e.g. a
    lone-surrogate escape, and stops at its own nesting limit while scanning ahead)."""
    try:
        return _compose(text, where, max_depth, yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or type(exc).__name__
        if not quote:
            problem = re.sub(r"'[^']*'|\"[^\"]*\"", "(...)", problem)
        raise BadInput(f"YAML syntax error: {problem}", path=where, line=line) from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_graph(root: yaml.Node, where: str, max_depth: int, max_nodes: int) -> None:
    """Walk the graph as a loader would (aliases expanded), without recursion, within limits."""
    seen = 0
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, list[yaml.Node]]] = []

    def enter(node: yaml.Node) -> None:
        nonlocal seen
        line = node.start_mark.line + 1
        if id(node) in on_path:
            raise BadInput("recursive YAML alias (a node contains itself)", path=where,
                           line=line)
        seen += 1
        if seen > max_nodes:
            raise BadInput(f"YAML expands to more than {max_nodes} nodes (alias expansion)",
                           path=where, line=line)
        if len(stack) >= max_depth:
            raise BadInput(f"YAML nested deeper than {max_depth} levels", path=where,
                           line=line)
        on_path.add(id(node))
        stack.append((node, _children(node)[::-1]))

    enter(root)
    while stack:
        node, todo = stack[-1]
        if todo:
            enter(todo.pop())
        else:
            stack.pop()
            on_path.discard(id(node))
