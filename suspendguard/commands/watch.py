"""``suspendguard watch``: hold a logind sleep block while the guard is certain to veto.

The loop is :mod:`suspendguard.guard.watch`; it runs as the optional
``suspendguard-watch.service`` (``Type=notify``) until stopped.
"""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.errors import UsageError
from suspendguard.guard.watch import watch


def command(args: argparse.Namespace, ctx: Context) -> int:
    recheck = float(args.recheck)
    debounce = float(args.debounce)
    if not 1.0 <= recheck <= 3600.0:
        raise UsageError(f"watch: --recheck {recheck:g}: give seconds from 1 to 3600")
    if not 0.0 <= debounce <= 10.0:
        raise UsageError(f"watch: --debounce {debounce:g}: give seconds from 0 to 10")
    return watch(ctx.config(), ctx.environ, ctx.err, recheck_s=recheck, debounce_s=debounce)
