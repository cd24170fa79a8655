"""``suspendguard config``: the effective configuration, as TOML."""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.config import to_toml


def command(args: argparse.Namespace, ctx: Context) -> int:
    ctx.out.write(to_toml(ctx.config()))
    return 0
