"""A freeform tool's input language (a Lark grammar or a regex) -> xgrammar EBNF of that language as a JSON string.

A freeform call (Codex's `apply_patch`) reaches the model's tool-call format as one JSON string argument (`{"input":
"…"}`, apis/responses/decode.py), because that is how the chat template renders it back on the next turn. So what the
grammar must constrain is the *escaped* text: JSON string escaping maps each character to a fixed string (`"` to
`\\"`, a newline to `\\n`, …), so mapping every character set of the grammar through it gives exactly the escaped
sentences. Only json.dumps' own escapes (ensure_ascii off) are allowed: what the model writes is then what the
template writes when the call is replayed, token for token.

Lark is read with the `lark` package (vLLM's own dependency, which compiles EBNF sugar into plain rules and `%import`s
into terminals); regexes with Python's regex parser. xgrammar reads Lark too (`Grammar.from_lark`), but only as raw
text, and the structural tag's `grammar` content takes EBNF: hence this translation. llguidance (vLLM's `guidance`
backend) reads Lark natively, but it would constrain the raw text too, and the rest of the tag (tool choice,
reasoning, strict tools) is written in xgrammar's structural-tag format, one backend per engine. Lark's lexer (longest match,
priorities) is read as a plain context-free grammar over characters, which accepts the same patches; features that
change the language beyond that (`%ignore`, lookarounds, anchors, backreferences) are refused with a reason, and
the tool is then served unconstrained.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from re import _constants as C  # type: ignore[attr-defined]  # the parser's opcodes (Python 3.11+)
from re import _parser as P  # type: ignore[attr-defined]
from typing import Iterable

Ranges = list[tuple[int, int]]  # sorted, disjoint, inclusive code point ranges

_MAX = sys.maxunicode
_SURROGATES: Ranges = [(0xD800, 0xDFFF)]  # not encodable as UTF-8: a model never writes one
_SPECIAL: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # what JSON strings must escape
_CATEGORY = {
    C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s", C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W",
}
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT))


class Untranslatable(ValueError):
    """The grammar uses something this translation cannot express as a context-free grammar over characters."""


def _norm(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _not(ranges: Ranges) -> Ranges:
    out, at = [], 0
    for lo, hi in ranges:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    return out + ([(at, _MAX)] if at <= _MAX else [])


def _minus(a: Ranges, b: Ranges) -> Ranges:
    return _not(_norm(_not(a) + b))


def _size(ranges: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in ranges)


@functools.lru_cache(maxsize=16)
def _category(escape: str, flags: int) -> Ranges:
    """The code points a class escape matches: found by one scan of every character, once per process."""
    every = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, _MAX + 1)))
    at = lambda i: i + 0x800 if i >= 0xD800 else i  # noqa: E731 - index in `every` -> code point
    return _norm((at(m.start()), at(m.end() - 1)) for m in re.finditer(escape + "+", every, flags & re.ASCII))


def _fold(ranges: Ranges) -> Ranges:
    """The set under IGNORECASE: each character with its other cases (small sets only)."""
    if _size(ranges) > 4096:
        raise Untranslatable("a case-insensitive class this large")
    extra = []
    for lo, hi in ranges:
        for c in map(chr, range(lo, hi + 1)):
            extra += [ord(v) for v in (c.lower(), c.upper(), c.swapcase()) if len(v) == 1]
    return _norm(ranges + [(x, x) for x in extra])


def _set(op, av, flags: int) -> Ranges:
    """The characters one regex item matches."""
    if op is C.LITERAL:
        ranges = [(av, av)]
    elif op is C.NOT_LITERAL:
        return _not(_fold([(av, av)]) if flags & re.IGNORECASE else [(av, av)])
    elif op is C.ANY:
        return [(0, _MAX)] if flags & re.DOTALL else _not([(10, 10)])
    else:  # IN
        ranges, negate = [], False
        for item, arg in av:
            if item is C.NEGATE:
                negate = True
            elif item is C.LITERAL:
                ranges.append((arg, arg))
            elif item is C.RANGE:
                ranges.append(arg)
            elif item is C.CATEGORY and arg in _CATEGORY:
                ranges += _category(_CATEGORY[arg], flags)
            else:
                raise Untranslatable(f"the class item {item}")
        ranges = _norm(ranges)
        if flags & re.IGNORECASE:
            ranges = _fold(ranges) if not negate else _not(_fold(_not(ranges)))
        return _not(ranges) if negate else ranges
    return _fold(ranges) if flags & re.IGNORECASE else ranges


def _esc(c: int) -> str:
    """One character as xgrammar's EBNF writes it inside a string or a class."""
    ch = chr(c)
    if ch.isascii() and (ch.isalnum() or ch in " !#$%&'()*+,./:;<=>?@_`{|}~"):
        return ch
    if ch in '\\"':
        return "\\" + ch
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


def _string(text: str) -> str:
    return '"' + "".join(_esc(ord(ch)) for ch in text) + '"'


def _escaped(text: str) -> str:
    """A literal as its JSON-escaped text, one EBNF string."""
    return _string(json.dumps(text, ensure_ascii=False)[1:-1])


def _json_chars(ranges: Ranges) -> str:
    """One character of the set, as the JSON string text that writes it (json.dumps' escape where it has one)."""
    plain = _minus(ranges, _norm(_SPECIAL + _SURROGATES))
    alternatives = ["[" + "".join(_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in plain) + "]"] if plain else []
    specials = [c for lo, hi in _minus(ranges, _not(_SPECIAL)) for c in range(lo, hi + 1)]
    alternatives += [_escaped(chr(c)) for c in specials]
    if not alternatives:
        raise Untranslatable("an empty character class")
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def _repeat(lo: int, hi: int) -> str:
    if hi == C.MAXREPEAT:
        return {0: "*", 1: "+"}.get(lo, f"{{{lo},}}")
    return "?" if (lo, hi) == (0, 1) else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


def _sequence(items, flags: int) -> str:
    parts: list[str] = []
    run: list[str] = []  # consecutive literal characters: one EBNF string
    for op, av in items:
        if op is C.LITERAL and not flags & re.IGNORECASE:
            run.append(chr(av))
            continue
        if run:
            parts.append(_escaped("".join(run)))
            run = []
        parts.append(_item(op, av, flags))
    if run:
        parts.append(_escaped("".join(run)))
    return " ".join(parts) or '""'


def _item(op, av, flags: int) -> str:
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        return _json_chars(_set(op, av, flags))
    if op is C.BRANCH:
        return "(" + " | ".join(_sequence(p, flags) for p in av[1]) + ")"
    if op is C.SUBPATTERN:
        _group, add, remove, p = av
        return "(" + _sequence(p, (flags | add) & ~remove) + ")"
    if op in _REPEATS:
        lo, hi, p = av
        return "(" + _sequence(p, flags) + ")" + _repeat(lo, hi)
    raise Untranslatable(f"the regex construct {op}")


def _regex(pattern: str, flags: int = 0) -> str:
    try:
        parsed = P.parse(pattern, flags)
    except re.error as exc:
        raise Untranslatable(f"an invalid regex ({exc})") from exc
    return _sequence(parsed, parsed.state.flags)


def _lark(definition: str) -> str:
    """Rules as Lark compiles them (EBNF sugar and templates expanded, terminals as regexes), written as EBNF."""
    try:
        from lark.load_grammar import load_grammar
        from lark.lexer import PatternStr

        grammar, _ = load_grammar(definition, "<tool grammar>", None, False)
        terminals, rules, ignore = grammar.compile(["start"], set())
    except Untranslatable:
        raise
    except Exception as exc:  # noqa: BLE001 - lark raises GrammarError, UnexpectedInput, KeyError, …
        raise Untranslatable(f"the Lark grammar does not load ({exc})") from exc
    if ignore:
        raise Untranslatable("%ignore")
    lines = ["root ::= r_start"]
    alternatives: dict[str, list[str]] = {}
    for rule in rules:
        symbols = [("t_" if s.is_term else "r_") + s.name for s in rule.expansion]
        alternatives.setdefault(rule.origin.name, []).append(" ".join(symbols) or '""')
    lines += [f"r_{name} ::= " + " | ".join(alts) for name, alts in alternatives.items()]
    for t in terminals:
        p = t.pattern  # a string without flags is one literal; anything else as the regex Lark would lex it with
        body = _escaped(p.value) if isinstance(p, PatternStr) and not p.flags else _regex(p.to_regexp())
        lines.append(f"t_{t.name} ::= {body}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _translate(syntax: str, definition: str) -> tuple[str | None, str]:
    """(EBNF, "") or (None, why not); the EBNF is one xgrammar builds, so a translated tool never fails a request."""
    import xgrammar as xgr

    try:
        if syntax == "regex":
            ebnf = "root ::= " + _regex(definition)
        elif syntax == "lark":
            ebnf = _lark(definition)
        else:
            raise Untranslatable(f"grammar syntax {syntax!r}")
        try:
            xgr.Grammar.from_ebnf(ebnf)
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError with the reason
            raise Untranslatable(f"a form xgrammar refuses ({str(exc)[:300]})") from exc
        return ebnf, ""
    except Untranslatable as exc:
        return None, str(exc)


def json_string_ebnf(syntax: str, definition: str) -> str:
    """xgrammar EBNF whose `root` is a sentence of the grammar written as JSON string content (without the quotes).
    Remembered, refusals too: a harness sends the same tools every turn. Raises Untranslatable with the reason."""
    ebnf, reason = _translate(syntax, definition)
    if ebnf is None:
        raise Untranslatable(reason)
    return ebnf
