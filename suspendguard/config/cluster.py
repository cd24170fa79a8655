"""The ``[slurm]`` section: how a Slurm cluster's power saving asks each node's guard first.

Its own file beside schema.py, which holds the host's sections; schema.py
lists it among the sections like any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from suspendguard.config.spec import TIMEOUT, setting

DEFAULT_REMOTE = ["/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "{node}"]
# One Slurm hostlist expression: names, each with bracketed ranges ("gpu[01-04,07]"), joined
# by commas, each set with the count SuspendExcNodes takes after it ("nid[10-20]:4": keep 4
# of them up). It goes into slurm.conf's SuspendExcNodes= line as it is: a space, "#", "="
# or a newline there is a parse error, and slurmctld exits at its next re-read.
_NAME = r"(?:[A-Za-z0-9._-]|\[[0-9,-]+\])+(?::[0-9]+)?"
HOSTLIST = re.compile(f"{_NAME}(?:,{_NAME})*")


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
