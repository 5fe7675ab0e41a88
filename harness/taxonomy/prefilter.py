"""Literal anchors of a run's signatures: a line holding none of them matches no signature.

Computed from the signatures' own regexes (the table's, a backend's, the runbook's; a family
member's from its family's gate), so a new row of signatures.yaml needs no change here. The compiled sifter
(`harness.telemetry._scan.sift`) uses them to hand the taxonomy only the lines that may hold
a signature or a row; a regex without a literal every match must contain (`.*`, `\\d+`)
turns the prefilter off (every line is read, as the pure path does). Sound by construction
(each anchor is a substring every match contains) and by test (tests/unit/test_classify_sift.py
checks `Matcher.match(line)` implies an anchor on generated lines).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.taxonomy.signatures import Signature

try:                                  # the stdlib's regex parser (CPython Lib/re/_parser.py)
    import re._parser as sre  # Python >= 3.11
except ImportError:                   # pragma: no cover - Python 3.10
    import sre_parse as sre  # type: ignore[no-redef]

# Under IGNORECASE these ASCII letters also match non-ASCII characters (K: KELVIN SIGN,
# s: LONG S, i: DOTTED CAPITAL I ...), so an ASCII-folded byte search would miss them: an
# anchor never spans them (tests check the list against every code point).
FOLD_BREAKERS = frozenset("iks")
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


@dataclass(frozen=True)
class Anchors:
    """Byte strings one of which every signature match contains: `exact` as written,
    `folded` (from IGNORECASE regexes) lower-case, compared ASCII-case-insensitively."""

    exact: tuple[bytes, ...]
    folded: tuple[bytes, ...]


Options = frozenset[tuple[str, bool]]    # (literal, folded): a match contains one of them


def _breaks(ch: str, fold: bool) -> bool:
    """Whether this character cannot be part of a byte anchor."""
    if ch == "\ufffd" or "\ud800" <= ch <= "\udfff":    # decode's replacement, surrogates
        return True
    return fold and (not ch.isascii() or ch.lower() in FOLD_BREAKERS)


def _score(options: Options) -> tuple:
    """Better anchors: a longer shortest literal, then fewer alternatives."""
    return (min(len(t) for t, _ in options), -len(options))


def _required(items, fold: bool) -> Options | None:
    """Literals one of which every match of this parsed sequence contains (None: none)."""
    best: Options | None = None
    run: list[str] = []

    def consider(options: Options | None) -> None:
        nonlocal best
        if options and (best is None or _score(options) > _score(best)):
            best = options

    def close() -> None:
        if run:
            consider(frozenset({("".join(run), fold)}))
            run.clear()

    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            ch = chr(av)
            if _breaks(ch, fold):
                close()
            else:
                run.append(ch.lower() if fold else ch)
        elif name == "AT":                      # zero-width (^, $, \b): the run goes on
            continue
        elif name == "SUBPATTERN":
            close()
            _group, add, drop, sub = av
            inner = (fold or bool(add & re.IGNORECASE)) and not drop & re.IGNORECASE
            consider(_required(sub, inner))
        elif name == "ATOMIC_GROUP":
            close()
            consider(_required(av, fold))
        elif name in _REPEATS:
            close()
            low, _high, sub = av
            if low >= 1:
                consider(_required(sub, fold))
        elif name == "BRANCH":
            close()
            alts = [_required(alt, fold) for alt in av[1]]
            if all(alts):
                consider(frozenset().union(*alts))
        else:                                   # a class, any char, a lookaround, a backref
            close()
    close()
    return best


def required_literals(regex: re.Pattern) -> Options | None:
    """(literal, folded) pairs one of which every match of the regex contains, or None."""
    if not isinstance(regex.pattern, str):
        return None
    try:
        parsed = sre.parse(regex.pattern, regex.flags)
    except Exception:                  # noqa: BLE001 - an unparsable regex: no prefilter
        return None
    return _required(list(parsed), bool(regex.flags & re.IGNORECASE))


def anchors_of(signatures: Iterable[Signature]) -> Anchors | None:
    """The anchors of the signatures, or None when one of them has no literal anchor. A
    family member is matched only on a line its family's gate matches (Matcher.match), so
    the gate's anchors stand for the member's (a few regexes to parse, not hundreds).
    Cached: a campaign judges many runs with the same signatures."""
    regexes = dict.fromkeys(s.gate or s.regex for s in signatures)
    return _anchors(tuple((r.pattern, r.flags) for r in regexes))


@functools.lru_cache(maxsize=16)
def _anchors(regexes: tuple[tuple[str, int], ...]) -> Anchors | None:
    exact: set[bytes] = set()
    folded: set[bytes] = set()
    for pattern, flags in regexes:
        options = required_literals(re.compile(pattern, flags)) \
            if isinstance(pattern, str) else None
        if options is None:
            return None
        for text, fold in options:
            (folded if fold else exact).add(text.encode("utf-8"))
    return Anchors(tuple(sorted(exact)), tuple(sorted(folded)))
