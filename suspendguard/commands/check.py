"""``suspendguard check``: the guard's run, always a dry run.

The run itself, which ``pre-sleep``, ``drain`` and ``suspend`` share, is
:func:`suspendguard.guard.run.run_guard`.
"""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.guard.run import run_guard
from suspendguard.store import mode as guard_mode

# What a real suspend meets in each mode but enforce, after check's verdict.
NOT_ENFORCED = {"observe": "a suspend is looked at and goes ahead, whatever the verdict",
                "off": "a suspend goes ahead without a look"}


def check(args: argparse.Namespace, ctx: Context) -> int:
    # Read-only whatever the flags: --dry-run is only still accepted.
    status = run_guard(ctx, True, None, "cli", args.json, getattr(args, "wide", False))
    mode = guard_mode.shown(ctx.config().state.dir)
    if not args.json and mode.name in NOT_ENFORCED:
        ctx.out.write(f"\nthe guard's mode is {mode.name} (suspendguard mode): "
                      f"{NOT_ENFORCED[mode.name]}; the verdict above is enforce mode's\n")
    return status
