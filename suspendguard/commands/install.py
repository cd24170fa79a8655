"""``suspendguard install`` and ``suspendguard uninstall [--purge]``, live or under ``--root DIR``.

Exit 0 when done; 3 (one line) when the running system cannot take it:
not root, or systemd not running, or an interpreter that would not last or
cannot run the guard.
"""

from __future__ import annotations

import argparse

from suspendguard.commands.context import Context
from suspendguard.config import Config, load, resolve_path
from suspendguard.errors import InstallError
from suspendguard.install.files import Tree, check_live_system, install, uninstall
from suspendguard.install.interpreter import choose, probe, refuse_unsafe


def _config_for(ctx: Context, tree: Tree | None) -> tuple[Config, str, bool]:
    """(config, its path in the target system, chosen explicitly)."""
    path, explicit = resolve_path(ctx.config_arg, ctx.environ)
    if tree is None:
        return ctx.config(), path, explicit
    staged = tree.at(path)
    if explicit or staged.exists():
        return load(str(staged), {}), path, explicit
    return load(None, {}), path, explicit


def command_install(args: argparse.Namespace, ctx: Context) -> int:
    root = getattr(args, "root", None)
    if root is None:
        check_live_system()
    tree = Tree(root) if root is not None else None
    python = choose(getattr(args, "python", None), staged=root is not None)
    refuse_unsafe(python, getattr(args, "force", False))
    if root is None:
        # A unit whose interpreter cannot run the guard fails every suspend.
        found = probe(python)
        if not found.usable:
            raise InstallError(f"the units' interpreter {python} {found.reason}")
    config, config_path, explicit = _config_for(ctx, tree)
    install(
        root, config, config_path, explicit,
        enable=not getattr(args, "no_enable", False), python=python, out=ctx.out,
    )
    return 0


def command_uninstall(args: argparse.Namespace, ctx: Context) -> int:
    root = getattr(args, "root", None)
    if root is None:
        check_live_system()
    uninstall(root, purge=getattr(args, "purge", False), out=ctx.out, err=ctx.err)
    return 0
