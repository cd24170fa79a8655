"""``suspendguard check``: the guard's run, always a dry run.

The run itself, which ``pre-sleep``, ``drain`` and ``suspend`` share, is
:func:`suspendguard.guard.run.run_guard`.
"""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.guard.run import run_guard


def check(args: argparse.Namespace, ctx: Context) -> int:
    # Read-only whatever the flags: --dry-run is only still accepted.
    return run_guard(ctx, True, None, "cli", args.json, getattr(args, "wide", False))
