"""``suspendguard slurm ...``: Slurm's power-saving programs, its health check, and the nodes' answers.

On the controller, as SlurmUser: ``suspend HOSTLIST`` (SuspendProgram),
``resume HOSTLIST`` (ResumeProgram), ``sync`` (the SuspendExcNodes file,
on a timer). On each node, as root: ``health`` (HealthCheckProgram), and
``node prepare|awake|restart|rejoin``, which the controller runs through
``[slurm] remote`` and which print one JSON object. docs/slurm.md has the
slurm.conf lines.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, cast

from suspendguard.commands.context import Context
from suspendguard.commands.history import MAX_N
from suspendguard.config.trust import slurm_untrusted
from suspendguard.errors import (
    EXIT_ERROR,
    EXIT_VETO,
    ConfigUntrusted,
    OperationalError,
    UsageError,
)
from suspendguard.slurm.controller import Controller
from suspendguard.slurm.remote import slurm_reason, this_node
from suspendguard.slurm.scontrol import HostlistError, Scontrol, SlurmError
from suspendguard.system import runner
from suspendguard.system.log import ERR, WARNING, Logger
from suspendguard.verdict import VERDICT_EXIT_STATUS, Reason, VerdictKind


def command(args: argparse.Namespace, ctx: Context) -> int:
    _default_path(ctx.environ)
    config = ctx.config()
    log = Logger(ctx.err, ctx.environ)
    what = args.slurm_command
    if what == "node":
        return _node(args, ctx)
    if what == "health":
        from suspendguard.slurm.node import health
        doc = health(config, ctx.environ, log)
        ctx.out.write(f"{doc['node']}: {doc['action']}: {_health_said(doc)}\n")
        return EXIT_ERROR if "error" in doc else _exit_status(doc)
    controller = Controller(config.slurm, log, this_node(config.slurm, ctx.environ))
    if what == "sync":
        return 0 if controller.sync() else EXIT_ERROR
    if os.geteuid() == 0 and (why := slurm_untrusted(config, ctx.environ)):
        raise ConfigUntrusted(why)  # the remote, the power actions: root runs them here
    nodes: list[str] = []
    try:
        # scontrol reads $SLURM_JOB_NODELIST for an empty expression: never another list.
        if args.hostlist.strip(" ,"):
            nodes = Scontrol(config.slurm.scontrol).hostnames(args.hostlist)
    except HostlistError as exc:  # n[3-1], nid[10-20]:4: Slurm passes none such
        controller.journal(ERR, f"slurm {what}: {exc}")
        raise UsageError(f"slurm {what}: HOSTLIST {args.hostlist!r}: {exc}") from None
    except SlurmError as exc:
        controller.journal(ERR, f"slurm {what}: {exc}")  # the error below is stderr's one line
        raise OperationalError(f"slurm {what}: {exc}") from None
    if not nodes:
        controller.journal(ERR, f"slurm {what}: HOSTLIST {args.hostlist!r} names no node")
        raise UsageError(f"slurm {what}: HOSTLIST {args.hostlist!r} names no node")
    if features := getattr(args, "features", None):
        # What a job asks its nodes to boot into (node_features plugins: power_save.c's
        # power_job_reboot passes it after the hostlist); the guard wakes them as they are.
        controller.say(WARNING, f"slurm {what}: FEATURES {features!r} not applied: the nodes "
                       "wake as they are")
    done = controller.suspend(nodes) if what == "suspend" else controller.resume(nodes)
    # A held node missing from SuspendExcNodes is powered down again at the next cycle, and
    # one scontrol did not drain is not held at all: scontrol failed, whatever the rest did.
    return EXIT_ERROR if not (controller.synced and controller.drained) else 0 if done else EXIT_VETO


def _health_said(doc: dict[str, Any]) -> str:
    """What ``slurm health`` found, on its line: the first reason, what observe or off mode
    did not act on, and the scontrol error that stopped it. Healthy only when it knows."""
    details = [Reason.from_json(d) for d in doc["reason_details"]]
    looked = doc.get("observed")
    said = (slurm_reason(details[0]) if details
            else "accelerator healthy" if looked else "accelerator free and healthy")
    if looked:
        first = Reason.from_json(looked["reason_details"][0])
        said += f"; {doc['mode']} mode (suspendguard mode), not acted on: {slurm_reason(first)}"
    if "error" in doc:
        said += f"; nothing done: {doc['error']}"
    return said


def _default_path(environ: dict[str, str]) -> None:
    """A PATH where there is none: slurmctld runs its programs, and slurmd its
    HealthCheckProgram, without one, and a tool named in the configuration (npu-smi,
    installed in /usr/local/sbin) would be looked for in /bin and /usr/bin alone. Given to
    this process (its lookups and children) and to ``environ``, by which the
    configuration's trust rule judges the folders searched."""
    for env in (os.environ, environ):
        if not env.get("PATH"):
            env["PATH"] = runner.DEFAULT_PATH


def _node(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.slurm import node
    config = ctx.config()
    step = args.node_command
    me = this_node(config.slurm, ctx.environ)
    if args.as_node is not None and args.as_node != me:
        # The controller reached another host (a wrong ssh mapping, a DNS alias, a reused
        # address): a step here would drain, start or restart this host's own work on another
        # node's behalf. Nothing is done; the answer names this host, which the controller
        # holds its node for (node-unreachable: the node it meant was not reached).
        why = Reason("node-unreachable", f"asked as {args.as_node!r:.60} but this is {me!r:.60}: "
                     f"slurm node {step} not run; fix the controller's [slurm] remote mapping, "
                     "or set [slurm] node_name on this host if its host name is not its NodeName")
        doc = node.answer(me, "unknown", [why])
        ctx.out.write(json.dumps(doc) + "\n")
        return _exit_status(doc)
    if step == "prepare":
        doc = node.prepare(ctx, args.suspend)
    elif step == "awake":
        doc = node.awake(config, ctx.environ, time.time() - config.slurm.resume_wait_s)
    elif step == "restart":
        if not 1 <= args.attempt <= MAX_N:  # past SQLite's INTEGER, its read would overflow
            raise UsageError(f"slurm node restart: --attempt {args.attempt}: give the attempt's "
                             "ID that prepare answered with")
        doc = node.restart(ctx, args.attempt)
    else:
        doc = node.rejoin(config, ctx.environ, args.boot)
    ctx.out.write(json.dumps(doc) + "\n")
    return _exit_status(doc)


def _exit_status(doc: dict[str, Any]) -> int:
    """A node's answer's verdict as check's exit status (0 allow, 1 veto, 5 unknown)."""
    return VERDICT_EXIT_STATUS.get(cast(VerdictKind, doc["verdict"]), EXIT_VETO)
