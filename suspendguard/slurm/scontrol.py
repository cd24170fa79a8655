"""scontrol, as the guard's Slurm programs use it: node states and reasons, drains, the config re-read.

Every call is bounded and none raises for a failing tool: a refusal from
slurmctld comes back as :class:`SlurmError` with scontrol's own words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from suspendguard.system import runner

CALL_TIMEOUT_S = 20.0

# "NodeName=node1 Arch=x86_64 ... State=IDLE+DRAIN+POWERED_DOWN ... Reason=why [root@2026-...]"
_FIELD = re.compile(r"(?:^|\s)([A-Z][A-Za-z_]*)=")
# What Slurm prints after a reason: the end of the line or one of these fields
# (src/api/node_info.c: Comment, Extra, InstanceId, InstanceType, ReservationName).
_NEXT = r"$| (?:Comment|Extra|InstanceId|InstanceType|ReservationName)="
# In one-liner mode each further line of a multi-line reason comes after line_end (" ")
# and seven spaces (node_info.c, Slurm 22.05); the first one right after the stamp.
_LINE_BREAK = " " * 8
# The "[user@time]" stamp Slurm adds after a reason's first line. Looked for first: a
# reason's own words may look like one of the fields that follow it.
_STAMP = re.compile(rf"\s\[[^\]@]+@[^\]]+\](?={_LINE_BREAK}|{_NEXT})")
_END = re.compile(rf"(?={_NEXT})")


class SlurmError(RuntimeError):
    """scontrol failed or slurmctld refused; the message says which call and why."""


class HostlistError(SlurmError):
    """scontrol ran, and could not read the hostlist expression it was given: bad usage."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node as ``scontrol show node -o`` tells it."""

    name: str
    state: str  # the base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]  # DRAIN, POWERED_DOWN, POWERING_DOWN, NOT_RESPONDING, ...
    reason: str  # on one line, without scontrol's "[user@time]" stamp; "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def asleep(self) -> bool:
        return bool(self.flags & {"POWERED_DOWN", "POWERING_DOWN"})


def parse_nodes(text: str) -> list[Node]:
    """Each line of ``scontrol show node -o`` as a :class:`Node`."""
    nodes = []
    for line in text.splitlines():
        fields = _fields(line.strip())
        if "NodeName" not in fields:
            continue
        base, *flags = (fields.get("State") or "UNKNOWN").split("+")
        reason = fields.get("Reason", "")
        nodes.append(Node(fields["NodeName"], base.rstrip("*"), frozenset(flags),
                          "" if reason in ("(null)", "none") else reason))
    return nodes


def _fields(line: str) -> dict[str, str]:
    """KEY=VALUE pairs. Reason may hold spaces, even words like KEY=VALUE: its first line
    runs to the "[user@time]" stamp scontrol adds, and its further lines, after the stamp,
    to the fields that may follow it."""
    head, sep, reason = line.partition(" Reason=")
    tail = ""
    if sep:
        stamp = _STAMP.search(reason)
        first, rest = (reason[:stamp.start()], reason[stamp.end():]) if stamp else ("", reason)
        end = _END.search(rest)
        assert end is not None  # it matches at the end of the line, if nowhere before
        rest, tail = rest[:end.start()], rest[end.end():]
        # A multi-line reason's further lines are kept, each joined to the one before by
        # a space: a held node's reason is built on this one, so the admin's words go
        # there whole, on one line, and never with the stamp.
        lines = [first, *rest.split(_LINE_BREAK)]
        reason = " ".join(part.strip() for part in lines if part.strip())
    out: dict[str, str] = {}
    for part in (head, tail):
        marks = list(_FIELD.finditer(part))
        for i, m in enumerate(marks):
            stop = marks[i + 1].start() if i + 1 < len(marks) else len(part)
            out.setdefault(m.group(1), part[m.end():stop].strip())
    if sep:
        out["Reason"] = reason.strip()
    return out


class Scontrol:
    """The scontrol command of ``[slurm] scontrol``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _call(self, args: Sequence[str], what: str) -> str:
        return self._run(args, what).stdout

    def _run(self, args: Sequence[str], what: str) -> runner.RunResult:
        result = runner.run([self.path, *args], CALL_TIMEOUT_S)
        if not result.ok:
            raise SlurmError(f"{what}: {result.describe_failure()}")
        return result

    def hostnames(self, hostlist: str) -> list[str]:
        """A hostlist expression ("node[1-3],gpu7") as Slurm itself expands it.

        scontrol 22.05 exits 0 on one it cannot read: "Invalid hostlist" on stderr (and
        nothing expanded), or a name with a bracket left in it ("n[1-2" gives "n]")."""
        what = f"scontrol show hostnames {hostlist}"
        result = self._run(["show", "hostnames", hostlist], what)
        names = [n for n in result.stdout.split() if n]
        if "Invalid hostlist" in result.stderr or any(set(n) & set("[]") for n in names):
            said = result.stderr.strip().splitlines()
            raise HostlistError(f"{what}: {said[-1] if said else 'not a hostlist'}")
        return names

    def nodes(self, name: str | None = None) -> list[Node]:
        args = ["show", "node", "-o", *([name] if name else [])]
        return parse_nodes(self._call(args, "scontrol " + " ".join(args)))

    def node(self, name: str) -> Node:
        found = [n for n in self.nodes(name) if n.name == name]
        if not found:
            raise SlurmError(f"scontrol show node {name}: no such node")
        return found[0]

    def update(self, name: str, state: str, reason: str | None = None) -> None:
        args = ["update", f"NodeName={name}", f"State={state}"]
        if reason is not None:
            args.append(f"Reason={reason}")
        self._call(args, f"scontrol update NodeName={name} State={state}")

    def reconfigure(self) -> None:
        self._call(["reconfigure"], "scontrol reconfigure")
