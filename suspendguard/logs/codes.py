"""The vendor's error codes: the table (data/vendor-codes.toml) and where a line carries one.

A line is named by the code it carries even when its wording is new. Codes
are found by position, never with a regex per code: an E code (``EL0004``,
``E30003``) or a torch_npu code (``ERR00100``) is a token of its own shape;
a number is a code only where a runtime, DCMI or framework message prints
its return code (``ErrCode=507035``, ``runtime result = 507015``,
``ret is -8005``, ``ret[207001]``). Each shape is one regex with a literal
prefix, so the scanner finds it in one pass over a window at C speed, and a
line's codes come out of one pass over the line; the table is a dict. The
catalog's needles ride in the same two passes (``window_search``): one that
holds an ``E`` or an ``r`` is a branch of that shape's tree of literals.

The table is read on first use: the sleep hook's common case, logs without
a code, never parses it. What a record is named by, a wording or a code, is
``naming``'s.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10
    import tomli as tomllib

TABLE_FILE = "vendor-codes.toml"

# The shapes, each with its code where "{code}" stands. The regexes use no
# unbounded repetition (tests/logs/test_logs.py checks it), and each begins
# with a literal, which the regex engine finds at C speed: two shapes, so two
# passes over a window (measured: one regex for the three return-code forms,
# prefix "r", costs a third of three regexes). Each shape is written as its
# first character (the lead) and its forms after it, each a literal and a
# regex: the window scan merges the forms, and the catalog's needles that hold
# the lead, into one tree of literals (``window_search``).
_Forms = tuple[tuple[str, str], ...]


def _alternation(forms: _Forms) -> str:
    return "|".join(literal + rest for literal, rest in forms)


# E codes: E + module (digit or capital) + 4 digits; torch_npu: ERR + 2 + 3 digits.
_TOKEN_FORMS: _Forms = (("", "[0-9A-Z][0-9]{4}"), ("RR", "[0-9]{5}"))
_TOKEN_END = "(?![0-9A-Za-z_])"
_TOKEN = "{code}" + _TOKEN_END, f"E(?:{_alternation(_TOKEN_FORMS)})"
# A return code where a message prints one: 6 digits for aclError/rtError and
# aclnn (1xxxxx-5xxxxx), -8xxx for DCMI, 0x + 7 hex digits for the runtime's inner
# codes (retCode=0x7020019), 11757xxxx for those printed in decimal; anything else
# (ret=0, ret=-1, retCode=0x26) is no code.
# "ret is -8005" (npu-smi), "ret = 507015" (torch_npu [PTA], GE), "ret[207001]"
# (MindSpore), "retCode=0x7020019" (runtime); "ErrCode=507035" (runtime),
# "errorCode = 507033" (Ascend/samples), "error code is 507033" (torch_npu's "NPU
# function error"); "runtime result = 507015" (AscendCL's ReportCallError). The
# same forms with ":" ("ret: 507033", "Error code: 507033") are taken too.
_RETURN_FORMS: _Forms = (
    ("et", r"(?:Code)?(?: is | ?[=:\[] ?)"),
    ("r", r"(?:or)?(?:Code| [Cc]ode|_code)(?: is | ?[=:] ?)"),
    ("esult", r" ?[=:] ?"),
)
_RETURN_CODE = r"-8[0-9]{3}|[1-5][0-9]{5}|0x[0-9a-fA-F]{7}(?![0-9a-fA-F])|11757[0-9]{4}"
_RETURN_END = "(?![0-9])"
_RETURN = f"r(?:{_alternation(_RETURN_FORMS)}){{code}}{_RETURN_END}", _RETURN_CODE


def _is_word(c: int) -> bool:
    return 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95


def _is_letter(c: int) -> bool:
    return 65 <= c <= 90 or 97 <= c <= 122


def _token_fits(before: int | None, second: int) -> bool:
    return before is None or not _is_word(before)


def _return_fits(before: int | None, second: int) -> bool:
    if second == 114:  # "rr": the rest of "Err", "error", so an E comes before
        return before in (69, 101)
    return before is None or not _is_letter(before)  # "ret", "result" as words


@dataclass(frozen=True, slots=True)
class _Shape:
    template: str
    code: str
    # Whether a match stands where a code is printed: the character before it
    # (None at the start of the text) and the match's second character.
    fits: Callable[[int | None, int], bool]
    # The same test as lookbehinds, for windows where matches keep failing it
    # ("xEL0004 xEL0004 ..."): slower on ordinary text, as the regex then has no
    # literal prefix, but it stays in C however many matches fail.
    strict: str
    # The template again, for the window scan: lead + one of forms + end.
    lead: str
    forms: _Forms
    end: str

    def regex(self, group: str | None = None) -> str:
        inner = f"(?P<{group}>{self.code})" if group else f"(?:{self.code})"
        return self.template.replace("{code}", inner)

    def window_forms(self) -> _Forms:
        """The forms, each with the rest of a match after it: lead + any of them is the shape."""
        return tuple((literal, rest + self.end) for literal, rest in self.forms)


SHAPES: tuple[_Shape, ...] = (
    _Shape(*_TOKEN, _token_fits, r"(?<![0-9A-Za-z_])" + _TOKEN[0], "E", _TOKEN_FORMS, _TOKEN_END),
    _Shape(*_RETURN, _return_fits,
           r"(?:(?<![A-Za-z])(?=re)|(?<=[Ee])(?=rr))" + _RETURN[0],
           "r", _RETURN_FORMS, f"(?:{_RETURN_CODE}){_RETURN_END}"),
)
# Failed matches in one search before the strict regex takes over.
MAX_MISSES = 64


def _tree(entries: _Forms) -> str:
    """One regex for (literal, regex) pairs, the literals merged by their common beginnings.

    Each group's alternatives begin with distinct literal characters, which the
    regex engine compares before it tries one: a position costs a comparison
    per distinct next character, not a try per entry. An entry with nothing
    left matches at once, so the others of its group add nothing.
    """
    ends: list[str] = []
    by_char: dict[str, list[tuple[str, str]]] = {}
    for literal, rest in entries:
        if literal:
            by_char.setdefault(literal[0], []).append((literal[1:], rest))
        else:
            ends.append(rest)
    alternatives = [re.escape(c) + _tree(tuple(sub)) for c, sub in by_char.items()] + ends
    if "" in alternatives:
        return ""
    return alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"


def _anchors(needles: Sequence[str], lead: str, taken: set[str]) -> dict[str, int]:
    """Where in each needle holding ``lead`` (with a character after it) its scan starts.

    At every ``lead`` in the window the tree tries one branch per distinct
    character that follows the lead in it, so the needles are anchored where
    they share those characters: those of ``taken`` (the shape's own forms)
    first, then, greedily, the one that most needles left can use.
    """
    spots = {n: [i for i, c in enumerate(n[:-1]) if c == lead] for n in needles}
    left = {n: {n[i + 1] for i in at} for n, at in spots.items() if at}
    chosen = set(taken)
    while any(not (nexts & chosen) for nexts in left.values()):
        counts: dict[str, int] = {}
        for nexts in left.values():
            if not nexts & chosen:
                for c in nexts:
                    counts[c] = counts.get(c, 0) + 1
        chosen.add(max(sorted(counts), key=lambda c: counts[c]))
    return {n: next(i for i in spots[n] if n[i + 1] in chosen) for n in left}


@dataclass(frozen=True, slots=True)
class WindowScan:
    """One shape, and the needles folded into it, searched for in a window of bytes."""

    shape: _Shape
    rx: re.Pattern[bytes]
    strict: re.Pattern[bytes]
    # The needles alone, to tell a needle's hit from a code that does not fit.
    needles: re.Pattern[bytes] | None = None

    def next_at(self, buf: bytes | bytearray, lo: int, hi: int, pos: int) -> int:
        """The offset of the next code of this shape, or needle, in ``buf[pos:hi]``, or -1."""
        misses = 0
        while True:
            m = (self.rx if misses < MAX_MISSES else self.strict).search(buf, pos, hi)
            if m is None:
                return -1
            i = m.start()
            if self.shape.fits(None if i <= lo else buf[i - 1], buf[i + 1]):
                return i
            if self.needles is not None and self.needles.match(buf, i, hi):
                return i
            # Not a code, nor a needle: go on after its first character, where a
            # needle folded into the tree could still begin.
            misses += 1
            pos = i + 1


@dataclass(frozen=True, slots=True)
class WindowSearch:
    """How a window is searched: the shapes' scans, with what needles they carry, and the rest.

    ``rest``: the needles that hold no shape's lead, each a memmem pass of its own.
    """

    scans: tuple[WindowScan, ...]
    rest: tuple[str, ...]


def _compile(text: str) -> re.Pattern[bytes]:
    return re.compile(text.encode())


# Compiled on first use, as the catalog's patterns are: importing this module
# is on the sleep hook's path.
@functools.cache
def window_search(needles: tuple[str, ...] = ()) -> WindowSearch:
    """Fold each needle into the first shape whose lead it holds, so it costs no pass of its own.

    A needle is then matched whole: from its lead on as literals of the tree,
    the part before the lead by a lookbehind at the end. A hit is the same
    line that a search for the needle would find.
    """
    folded: list[list[tuple[str, str]]] = []
    rest = list(needles)
    for shape in SHAPES:
        anchors = _anchors(rest, shape.lead, {lit[0] for lit, _ in shape.forms if lit})
        # The part before the lead is checked last, by a lookbehind on the whole needle.
        folded.append([(n[at + 1:], f"(?<={re.escape(n)})" if at else "")
                       for n, at in anchors.items()])
        rest = [n for n in rest if n not in anchors]
    scans = []
    for shape, words in zip(SHAPES, folded, strict=True):
        tree = shape.lead + _tree(shape.window_forms() + tuple(words))
        strict = shape.strict.replace("{code}", f"(?:{shape.code})")
        only = shape.lead + _tree(tuple(words)) if words else None
        scans.append(WindowScan(
            shape,
            _compile(tree),
            _compile(f"{strict}|{only}" if only else strict),
            _compile(only) if only else None,
        ))
    return WindowSearch(tuple(scans), tuple(rest))


def window_scans() -> tuple[WindowScan, ...]:
    """The shapes' scans, no needle folded in."""
    return window_search().scans


@functools.cache
def _line() -> re.Pattern[str]:
    """One pass over a line finds every code in it: group cN is the code of shape N."""
    return re.compile("|".join(s.regex(f"c{n}") for n, s in enumerate(SHAPES)))


def codes_in(text: str) -> tuple[str, ...]:
    """The codes a line carries, each once, in the order they appear."""
    found: list[str] = []
    pos = 0
    line = _line()
    while (m := line.search(text, pos)) is not None:
        n = next(k for k in range(len(SHAPES)) if m.group(f"c{k}") is not None)
        i = m.start()
        if SHAPES[n].fits(None if i == 0 else min(ord(text[i - 1]), 127), ord(text[i + 1])):
            code = m.group(f"c{n}")
            found.append(code.lower() if code.startswith("0x") else code)
        pos = m.end()  # no code starts inside a match, whether it fitted or not
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True, slots=True)
class VendorCode:
    """One documented code: its name, the vendor's meaning and handling, and the catalog's rule.

    ``rule`` None: known, not ours (documented, but not a failure the
    catalog reports).
    """

    code: str
    name: str
    meaning: str
    handling: str
    rule: str | None
    block: str  # the block's title
    source: str  # the block's reference


@dataclass(frozen=True, slots=True)
class Block:
    id: str
    title: str
    source: str
    codes: tuple[VendorCode, ...]


def _code(entry: dict[str, Any], code: str, block: dict[str, Any], name: str) -> VendorCode:
    return VendorCode(
        code=code,
        name=name,
        meaning=str(entry["meaning"]),
        handling=str(entry.get("handling", block["handling"])),
        rule=str(entry["rule"]) if entry.get("rule") else None,
        block=str(block["title"]),
        source=" ".join(str(block["source"]).split()),
    )


def parse_table(text: str) -> tuple[Block, ...]:
    """The table's blocks; a framework block's codes composed from its submodules."""
    doc = tomllib.loads(text)
    blocks = [
        Block(b["id"], b["title"], b["source"],
              tuple(_code(c, str(c["code"]), b, str(c["name"])) for c in b["codes"]))
        for b in doc.get("block", ())
    ]
    for f in doc.get("framework", ()):
        codes = tuple(
            _code(c, f"{f['prefix']}{sub['id']}{c['code']}", f, f"{sub['name']} {c['name']}")
            for sub in f["submodules"] for c in f["codes"]
        )
        blocks.append(Block(f["id"], f["title"], f["source"], codes))
    return tuple(blocks)


@functools.cache
def blocks() -> tuple[Block, ...]:
    # Beside the package's other data (install/docs.py finds man/ the same way);
    # importlib.resources would cost the sleep hook's start-up tempfile and shutil.
    path = Path(__file__).resolve().parents[1] / "data" / TABLE_FILE
    return parse_table(path.read_text("utf-8"))


@functools.cache
def table() -> dict[str, VendorCode]:
    return {c.code: c for b in blocks() for c in b.codes}


def normalise(given: str) -> str:
    """A code as an operator pastes it (``el0004``, `` 507033``, ``ret is -8020``) -> its key."""
    text = given.strip()
    if re.fullmatch(r"[Ee][0-9A-Za-z][0-9]{4}|[Ee][Rr][Rr][0-9]{5}", text):
        return text.upper()
    if re.fullmatch(r"0[Xx][0-9A-Fa-f]{7}", text):
        return text.lower()
    found = codes_in(text)
    return found[0] if len(found) == 1 else text


def markdown_table() -> str:
    """docs/log-findings.md's table of the code blocks, generated so it cannot drift."""
    lines = ["| block | codes | named by a rule | rules | reference |", "|---|---|---|---|---|"]
    for b in blocks():
        named = [c for c in b.codes if c.rule]
        rules = ", ".join(f"`{r}`" for r in sorted({c.rule or "" for c in named})) or "none"
        source = " ".join(b.source.split()).replace("|", "\\|")
        lines.append(f"| {b.title} | {len(b.codes)} | {len(named)} | {rules} | {source} |")
    total = sum(len(b.codes) for b in blocks())
    lines.append(f"| all | {total} | {sum(1 for c in table().values() if c.rule)} | | |")
    return "\n".join(lines) + "\n"
