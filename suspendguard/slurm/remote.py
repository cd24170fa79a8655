"""Asking a node's guard: through ``[slurm] remote`` (ssh, pdsh), or directly on this host.

The node answers with one JSON object on its standard output (the
``suspendguard slurm node`` commands print nothing else there). No answer,
an answer that is not one, one from another node's guard, or a call past
``[slurm] timeout_s`` is a :class:`NoAnswer`: the caller holds the node up
rather than guess. Each question names the node meant (``--as NODE``): the
guard of a host reached by mistake runs no step and answers for itself.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.config.cluster import SlurmConfig
from suspendguard.system import runner
from suspendguard.system.log import INFO, WARNING
from suspendguard.verdict import Reason

PREFIX = "suspendguard:"  # of every reason the guard gives Slurm (NHC's is "NHC:")
REASON_MAX = 200  # Slurm keeps more; sinfo -R shows 20 columns by default


def slurm_reason(reason: Reason) -> str:
    """``suspendguard: CODE: text`` on one line, as a Slurm node reason."""
    text = " ".join(reason.text.split())
    out = f"{PREFIX} {reason.code}: {text}"
    return out if len(out) <= REASON_MAX else out[:REASON_MAX - 1] + "…"


def ours(reason: str) -> bool:
    """Whether a node's reason is one the guard gave."""
    return reason.startswith(PREFIX)


def joined(theirs: str, mine: str) -> str:
    """Somebody else's reason kept first, the guard's after it in parentheses.

    Too long, their words are cut before the guard's mark is: ``(suspendguard: CODE``
    must stay whole, or :func:`held_by_guard` no longer finds the node held (sync would
    take it out of SuspendExcNodes, and Slurm 22.05 power it down under its holder).
    """
    out = f"{theirs} ({mine})"
    if len(out) <= REASON_MAX:
        return out
    room = max(REASON_MAX - len(mine) - 3, REASON_MAX // 2)
    if len(theirs) > room:
        theirs = theirs[:room - 1] + "…"
    out = f"{theirs} ({mine})"
    return out if len(out) <= REASON_MAX else out[:REASON_MAX - 2] + "…)"


def held_by_guard(reason: str) -> bool:
    """Whether the guard holds the node up: its own drain, or its words after someone else's."""
    return ours(reason) or f"({PREFIX} " in reason


def this_node(config: SlurmConfig, environ: Mapping[str, str]) -> str:
    """This host's Slurm node name: ``[slurm] node_name``, $SLURMD_NODENAME, the short host name."""
    return config.node_name or environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Why a node's guard gave no answer (unreachable, missing, timed out, garbled)."""

    node: str
    why: str

    def reason(self) -> Reason:
        return Reason("node-unreachable", f"the guard on {self.node} did not answer: {self.why}")


def template(argv: Sequence[str], node: str) -> list[str]:
    """``argv`` with each ``{node}`` replaced by the node's name."""
    return [word.replace("{node}", node) for word in argv]


def ask(config: SlurmConfig, node: str, args: Sequence[str], *, local: bool,
        timeout: float | None = None) -> dict[str, Any] | NoAnswer:
    """The node's ``suspendguard slurm node ARGS --as NODE``, its JSON answer or why there is
    none. ``--as`` names the node meant: a host reached by mistake does nothing."""
    argv = [*(() if local else template(config.remote, node)), *config.guard,
            "slurm", "node", *args, "--as", node]
    # A node's guard reads its own configuration; SUSPENDGUARD_CONFIG goes along
    # only to a local one (ssh passes no environment).
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C.UTF-8"}
    # SLURMD_NODENAME too: the local guard must name itself as this host's controller does.
    for key in ("SUSPENDGUARD_CONFIG", "SLURMD_NODENAME") if local else ():
        if key in os.environ:
            env[key] = os.environ[key]
    result = runner.run(argv, config.timeout_s if timeout is None else timeout, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return NoAnswer(node, result.describe_failure() if not result.ok
                        else "no answer on its standard output")
    try:
        doc = json.loads(lines[-1])
    except ValueError as exc:
        return NoAnswer(node, f"its answer is not JSON ({exc})")
    if not isinstance(doc, dict):
        return NoAnswer(node, "its answer is not a JSON object")
    wrong = _misshapen(doc) or _misshapen(doc.get("observed") or {"verdict": "allow"})
    if not wrong and not isinstance(doc.get("node"), str):  # every guard's answer names it
        wrong = f"node {doc.get('node')!r:.40}"
    if wrong:  # a login banner's JSON, another program's: never read as a verdict
        return NoAnswer(node, f"its answer is not a guard's ({wrong})")
    if doc["node"] != node:
        # Another host's guard (a wrong ~/.ssh/config entry, a DNS alias, an address
        # reused): its verdict is on its own holders, never on the node asked. Given --as, that
        # guard ran no step and this answer is its refusal.
        return NoAnswer(node, f"answered as {doc['node']!r:.40} (another host, or its host "
                        "name is not its NodeName: set [slurm] node_name there)")
    return doc


def _misshapen(doc: Any) -> str:
    """What in a node's answer (or its ``observed``) is not as the guard writes it; "" if none."""
    if not isinstance(doc, dict):
        return f"{doc!r:.40} where an object belongs"
    if doc.get("verdict") not in ("allow", "veto", "unknown"):
        return f"verdict {doc.get('verdict')!r:.40}"
    for key in ("reasons", "reason_details"):
        value = doc.get(key, [])
        if not isinstance(value, list) or (key == "reasons"
                                           and not all(isinstance(r, str) for r in value)):
            return f"{key} {value!r:.40}"
    return ""


def unenforced(node: str, doc: Mapping[str, Any]) -> tuple[int, str] | None:
    """What a node in observe or off mode (suspendguard mode), which allows whatever it
    holds, is said with: the priority and the line; None for a node that enforces."""
    observed = doc.get("observed")
    if doc.get("mode") == "off":
        return INFO, f"{node}: its guard is off (suspendguard mode): not looked at"
    if isinstance(observed, dict) and observed.get("verdict") != "allow":
        why = "; ".join(str(r) for r in observed.get("reasons") or ()) or "no reason given"
        return WARNING, (f"{node}: observe mode (suspendguard mode): its guard only looked "
                         f"and would have refused ({observed.get('verdict')}): {why}")
    return None


def reasons_of(doc: Mapping[str, Any]) -> list[Reason]:
    """The ``reason_details`` of a node's answer (a reason it could not type is kept as text)."""
    out = []
    for item in doc.get("reason_details") or ():
        try:
            out.append(Reason.from_json(item))
        except ValueError:
            continue
    return out
