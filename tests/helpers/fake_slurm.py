"""A stand-in for scontrol: nodes kept in a JSON file, each call recorded there.

``show hostnames``, ``show node -o [NAME]``, ``update NodeName= State= [Reason=]``
and ``reconfigure``, as the guard's Slurm programs use them. RESUME takes a
POWERING_DOWN node to POWERED_DOWN and lifts a drain with its reason, and a
registration (:meth:`FakeSlurm.register`) of a POWERED_DOWN node frees its reason,
the DRAIN kept, as slurmctld 22.05 does; ``fail`` in the file names the calls that
fail (a verb, or the words a call begins with), ``times`` how many times more where
not forever.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = r'''
import fcntl, json, sys
STATE = {state!r}
with open(STATE + ".lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(STATE) as f:
        doc = json.load(f)
    args = sys.argv[1:]
    doc["calls"].append(args)
    verb = args[0]
    said = " ".join(args)
    key = next((k for k in doc["fail"] if said == k or said.startswith(k + " ")), None)
    failing = None if key is None else doc["fail"][key]
    if key in doc["times"]:
        doc["times"][key] -= 1
        if doc["times"][key] <= 0:
            del doc["fail"][key], doc["times"][key]
    if failing is None:
        if args[:2] == ["show", "hostnames"]:
            print("\n".join(args[2].split(",")))
        elif args[:2] == ["show", "node"]:
            for name, n in doc["nodes"].items():
                if args[3:] and args[3] != name:
                    continue
                state = "+".join([n["state"], *n["flags"]])
                # As 22.05's one-liner: the stamp after the first line, each further
                # line after line_end (" ") and seven spaces.
                first, *more = [part for part in n["reason"].split("\n") if part] or [""]
                reason = ("".join([first, " [slurm@2026-12-03T17:32:37]",
                                   *("        " + part for part in more)])
                          if first else "(null)")
                print(f"NodeName={{name}} Arch=x86_64 State={{state}} Partitions=main Reason={{reason}}")
        elif verb == "update":
            kv = dict(a.split("=", 1) for a in args[1:])
            n = doc["nodes"][kv["NodeName"]]
            if kv["State"] == "RESUME":
                n["flags"] = [f for f in n["flags"] if f != "DRAIN"]
                n["reason"] = ""
                if "POWERING_DOWN" in n["flags"]:
                    n["flags"] = [f for f in n["flags"] if f != "POWERING_DOWN"] + ["POWERED_DOWN"]
            elif kv["State"] == "DRAIN":
                n["flags"] = [f for f in n["flags"] if f != "DRAIN"] + ["DRAIN"]
                n["reason"] = kv["Reason"]
    with open(STATE, "w") as f:
        json.dump(doc, f)
if failing is not None:
    print(failing, file=sys.stderr)
    sys.exit(1)
'''


def node(flags: tuple[str, ...] = (), reason: str = "", state: str = "IDLE") -> dict[str, Any]:
    return {"state": state, "flags": list(flags), "reason": reason}


class FakeSlurm:
    """The fake's script (``path``) and its state file."""

    def __init__(self, folder: Path, nodes: dict[str, dict[str, Any]]) -> None:
        self.state = folder / "slurm-state.json"
        self.path = folder / "scontrol"
        self.write({"nodes": nodes, "calls": [], "fail": {}, "times": {}})
        self.path.write_text(f"#!{sys.executable}\n" + SCRIPT.format(state=str(self.state)))
        self.path.chmod(0o755)

    def read(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.state.read_text())
        return doc

    def write(self, doc: dict[str, Any]) -> None:
        self.state.write_text(json.dumps(doc))

    def node(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.read()["nodes"][name]
        return found

    def fail(self, call: str, why: str, times: int | None = None) -> None:
        """``call`` (``show``, ``show node -o node1``) fails with ``why``: ``times`` times,
        or until :meth:`heal`."""
        doc = self.read()
        doc["fail"][call] = why
        if times is not None:
            doc["times"][call] = times
        self.write(doc)

    def heal(self, call: str) -> None:
        doc = self.read()
        doc["fail"].pop(call, None)
        doc["times"].pop(call, None)
        self.write(doc)

    def register(self, name: str) -> None:
        """``name``'s slurmd registers (its start, each ``scontrol reconfigure``): the node is
        up again, and one slurmctld counted POWERED_DOWN loses its reason, the DRAIN kept
        (22.05's node_mgr.c, through clusteracct_storage_g_node_up)."""
        doc = self.read()
        n = doc["nodes"][name]
        if "POWERED_DOWN" in n["flags"]:
            n["reason"] = ""
        n["flags"] = [f for f in n["flags"] if f not in ("POWERED_DOWN", "POWERING_UP")]
        self.write(doc)

    def calls(self) -> list[list[str]]:
        calls: list[list[str]] = self.read()["calls"]
        return calls
