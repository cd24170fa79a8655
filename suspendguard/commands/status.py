"""``suspendguard status [--json | --prometheus]``: the operator's report, in the form asked for.

Three renderings of the same :class:`~suspendguard.status.model.Status`:
aligned text for people, JSON under stable keys, and the Prometheus text
exposition for node_exporter's textfile collector. Exit 0 whenever the
report was made, whatever it says (a veto now is reported, not returned).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from suspendguard.commands.context import Context
from suspendguard.status.collect import collect
from suspendguard.status.model import Status
from suspendguard.status.prometheus import exposition
from suspendguard.status.text import render
from suspendguard.system.terminal import terminal_width


def _collect(ctx: Context) -> Status:
    return collect(ctx.config_arg, ctx.environ)


def command(args: argparse.Namespace, ctx: Context,
            collector: Callable[[Context], Status] = _collect) -> int:
    status = collector(ctx)
    if getattr(args, "json", False):
        json.dump(status.to_json(), ctx.out, indent=2)
        ctx.out.write("\n")
    elif getattr(args, "prometheus", False):
        ctx.out.write(exposition(status))
    else:
        colour = ctx.out.isatty() and "NO_COLOR" not in ctx.environ
        width = None if getattr(args, "wide", False) else terminal_width(ctx.environ, ctx.out)
        render(status, ctx.out, colour, width)
    return 0
