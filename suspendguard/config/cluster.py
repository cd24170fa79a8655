"""The ``[slurm]`` section: how a Slurm cluster's power saving asks each node's guard first.

Its own file beside schema.py, which holds the host's sections; schema.py
lists it among the sections like any other.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from suspendguard.config.spec import TIMEOUT, setting
from suspendguard.system.terminal import safe

DEFAULT_REMOTE = ["/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "{node}"]
# One Slurm hostlist expression: names, each with bracketed ranges ("gpu[01-04,07]"), joined
# by commas, each set with the count SuspendExcNodes takes after it ("nid[10-20]:4": keep 4
# of them up). It goes into slurm.conf's SuspendExcNodes= line as it is: a space, "#", "="
# or a newline there is a parse error, and slurmctld exits at its next re-read.
_NAME = r"(?:[A-Za-z0-9._-]|\[[0-9,-]+\])+(?::[0-9]+)?"
HOSTLIST = re.compile(f"{_NAME}(?:,{_NAME})*")
# The parts of an expression HOSTLIST took: its names, each with the count after it, and
# in a name its brackets and the text between them; in a bracket, one range.
_TERM = re.compile(r"((?:[^\[\],:]|\[[^\]]*\])+)(?::([0-9]+))?")
_PIECE = re.compile(r"\[([^\]]*)\]|[^\[]+")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]*))?")
# The hosts one bracketed range may hold: Slurm's hostlist refuses more ("Too many hosts in
# range", hostlist.c MAX_RANGE).
MAX_RANGE = 64 * 1024
# A set of more names than this is not expanded to take out the names it repeats (Slurm
# counts a node once): more nodes than a cluster has, its count is let be, and a config
# read at every suspend is not held up expanding it.
_EXPAND_MAX = 65536
# Slurm 22.05 reads SuspendExcNodes whole (power_save.c, _parse_exc_nodes): one range it
# cannot read, or one count below 1 or above its set's size, and it ignores the line, the
# nodes the guard holds there with it.
_IGNORED = "Slurm would ignore the whole SuspendExcNodes line, the nodes the guard holds with it"

# A name's pieces: its text, and each bracket's ranges (low, high, the width written).
Piece = str | list[tuple[int, int, int]]


def exclude_sets(entry: str) -> list[tuple[str, int | None]]:
    """The sets of one ``[slurm] exclude`` entry (HOSTLIST took it) as SuspendExcNodes reads
    them: a count (``nid[10-20]:4``) is for every name since the count before it
    (``a,n[1-4]:2``: two of a and n1 to n4); the names after the last count are a set of
    their own, with none."""
    return [(",".join(names), count) for names, count in _sets(entry)]


def _sets(entry: str) -> list[tuple[list[str], int | None]]:
    sets: list[tuple[list[str], int | None]] = []
    names: list[str] = []
    for term in _TERM.finditer(entry):
        names.append(term.group(1))
        if term.group(2) is not None:
            sets.append((names, int(term.group(2))))
            names = []
    if names:
        sets.append((names, None))
    return sets


def exclude_problem(entry: str) -> str | None:
    """Why ``entry`` cannot go into SuspendExcNodes, said after the key (``expected ...,
    got ...``); None when it can."""
    if not HOSTLIST.fullmatch(entry):
        return ("expected one Slurm hostlist expression per entry (names of letters, digits, "
                ". _ -, ranges such as node[01-04,07], joined by commas; no spaces), got "
                f"{safe(entry)!r}")
    try:
        sets = _sets(entry)
    except ValueError:
        # A count of more digits than Python makes a number of (4300): none is that small.
        digits = max(len(term.group(2) or "") for term in _TERM.finditer(entry))
        return (f"expected each count from 1 to the number of names in its set, got a count "
                f"of {digits} digits: {_IGNORED}")
    for names, count in sets:
        try:
            pieces = [_pieces(name) for name in names]
        except ValueError as exc:
            return (f"expected each bracketed range as low-high, low no more than high and at "
                    f"most {MAX_RANGE} hosts, got {entry!r} (the range {str(exc)!r}): {_IGNORED}")
        if trailing := [name for name, parts in zip(names, pieces, strict=True)
                        if len(parts) > 1 and isinstance(parts[-1], str)]:
            return (f"expected each name with a bracketed range to end with one (Slurm 22.05 "
                    f"reads no text after its last: n[1-2].ib[1], not n[1-2].ib), got "
                    f"{entry!r} (the name {trailing[0]!r}): {_IGNORED}")
        if count is None:
            continue
        size = _set_size(pieces)
        if not 1 <= count <= size:
            return (f"expected each count from 1 to the number of names in its set ({size} in "
                    f"{','.join(names)}), got {entry!r}: {_IGNORED}")
    return None


def _pieces(name: str) -> list[Piece]:
    """One name's pieces (``rack[1-2]n[01-04]``); ValueError naming a range Slurm refuses."""
    pieces: list[Piece] = []
    for piece in _PIECE.finditer(name):
        if piece.group(1) is None:
            pieces.append(piece.group())
            continue
        ranges = []
        for part in piece.group(1).split(","):
            m = _RANGE.fullmatch(part)
            if m is None:
                raise ValueError(part)
            low, high = int(m.group(1)), int(m.group(2) or m.group(1))  # "1-" is 1 to Slurm
            if low > high or high - low >= MAX_RANGE:
                raise ValueError(part)
            ranges.append((low, high, len(m.group(1))))
        pieces.append(ranges)
    return pieces


def _set_size(names: list[list[Piece]]) -> int:
    """How many names the set holds, each once; past ``_EXPAND_MAX``, counted with repeats."""
    def choices(piece: Piece) -> int:
        return 1 if isinstance(piece, str) else sum(high - low + 1 for low, high, _ in piece)

    def written(piece: Piece) -> list[str]:
        # As Slurm writes a host: padded to the width its range's low end was written with.
        if isinstance(piece, str):
            return [piece]
        return [str(n).zfill(width) for low, high, width in piece for n in range(low, high + 1)]

    most = sum(math.prod(choices(p) for p in pieces) for pieces in names)
    if most > _EXPAND_MAX:
        return most
    return len({"".join(name) for pieces in names
                for name in itertools.product(*(written(p) for p in pieces))})


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    remote: tuple[str, ...] = setting(
        DEFAULT_REMOTE, "list",
        "How the controller runs a command on a node: an argv template, {node} replaced by "
        "the Slurm node name; the node's guard command is appended. A node that is this "
        "host is asked directly when the program runs as root (as SlurmUser, through the "
        "remote: its guard must run as root).",
    )
    guard: tuple[str, ...] = setting(
        ["/usr/bin/suspendguard"], "list",
        "The guard command on the nodes, as the remote runs it (with its arguments).",
    )
    timeout_s: float = setting(
        120.0, "float",
        "Seconds one question to a node may take (the drain of its jobs outside Slurm "
        "included); a node that has not answered by then is held up, not powered down.",
        bounds=TIMEOUT,
    )
    power_off: tuple[str, ...] = setting(
        [], "list",
        "The power action once a node's guard allows, run on the controller, {node} replaced "
        "(ipmitool, a power-off over ssh); empty: the node suspends itself through its guard.",
    )
    power_on: tuple[str, ...] = setting(
        [], "list",
        "The wake command run on the controller for each node to resume, {node} replaced "
        "(wakeonlan, ipmitool); empty: nothing is run (the node wakes by other means).",
    )
    resume_wait_s: float = setting(
        240.0, "float",
        "Seconds the resume waits for a woken node's guard to answer (keep it under Slurm's "
        "ResumeTimeout).", bounds=TIMEOUT,
    )
    scontrol: str = setting("/usr/bin/scontrol", "path", "Slurm's scontrol command.")
    exclude_file: str = setting(
        "/var/lib/slurm/suspendguard-exclude.conf", "str",
        "The file slurm.conf includes, where the controller keeps SuspendExcNodes: the nodes "
        "the guard drained. It must exist on every host that reads slurm.conf. Empty: none is kept "
        "(Slurm 23.02 and later, with SuspendExcStates=DRAIN).",
    )
    exclude: tuple[str, ...] = setting(
        [], "list",
        "Nodes (Slurm hostlist expressions) always in SuspendExcNodes, as the site's own "
        "slurm.conf would have them: the file above replaces that line.",
    )
    slurmd_unit: str = setting("slurmd.service", "str",
                               "The slurmd unit a node restarts to register after a wake.")
    node_name: str = setting(
        "", "str",
        "This host's Slurm node name; empty: $SLURMD_NODENAME, else the short host name.",
    )
