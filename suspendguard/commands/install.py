"""``suspendguard install`` and ``suspendguard uninstall [--purge]``, live or under ``--root DIR``.

Exit 0 when done; 3 (one line) when the running system cannot take it:
not root, or systemd not running, or an interpreter that would not last or
cannot run the guard, or a package's unit already there (unless ``--force``);
4 (one line), as for a configuration root may not trust, when others could
change the interpreter or the guard's code it imports (root runs both at
every suspend), unless ``--force``.
"""

from __future__ import annotations

import argparse
import os

from suspendguard.commands.context import Context
from suspendguard.config import Config, defaults, load, resolve_path
from suspendguard.errors import InstallError, UsageError
from suspendguard.install.files import check_live_system, check_root, install, uninstall
from suspendguard.install.interpreter import choose, probe, refuse_unsafe, refuse_untrusted
from suspendguard.install.templates import UNIT_DIRS, UNIT_TEMPLATE, timeout_start_s
from suspendguard.install.tree import Tree


def _root_of(args: argparse.Namespace) -> str | None:
    root: str | None = getattr(args, "root", None)
    check_root(root)
    return root


def _config_for(ctx: Context, tree: Tree | None) -> tuple[Config, str, bool]:
    """(config, its absolute path in the target system, chosen explicitly).

    The path goes into the unit and the hook, which systemd runs from /: a
    relative one is made absolute here, from the current folder, for the
    running system; for a staged one (--root) it would name a file of
    another system, so it must be absolute already.
    """
    path, explicit = resolve_path(ctx.config_arg, ctx.environ)
    if explicit and not os.path.isabs(path):
        if tree is not None:
            raise UsageError(f"--config {path}: with --root, give the configuration's path in "
                             "the target system, as an absolute path")
        path = os.path.abspath(path)
        ctx.config_arg = path
    if tree is None:
        return ctx.config(), path, explicit
    staged = tree.at(path)
    if explicit or staged.exists():
        return load(str(staged), {}), path, explicit
    # Nothing staged: the target gets the defaults, never this machine's own file.
    return defaults(), path, explicit


def command_install(args: argparse.Namespace, ctx: Context) -> int:
    root = _root_of(args)
    if root is None:
        check_live_system()
    tree = Tree(root) if root is not None else None
    given = getattr(args, "python", None)
    if root is not None and given and not os.path.isabs(given):
        # The unit runs it from / on the target: a path from here would name nothing there.
        raise UsageError(f"--python {given}: with --root, give the interpreter's path in the "
                         "target system, as an absolute path")
    python = choose(given, staged=root is not None)
    refuse_unsafe(python, getattr(args, "force", False))
    if root is None:
        # A unit whose interpreter cannot run the guard fails every suspend.
        found = probe(python)
        if not found.usable:
            raise InstallError(f"the units' interpreter {python} {found.reason}")
        refuse_untrusted(found, getattr(args, "force", False), ctx.err)
    config, config_path, explicit = _config_for(ctx, tree)
    _refuse_beside_a_package(tree or Tree("/"), config, getattr(args, "force", False))
    install(
        root, config, config_path, explicit,
        enable=not getattr(args, "no_enable", False), python=python, out=ctx.out,
        watch=getattr(args, "watch", False),
    )
    return 0


def _refuse_beside_a_package(tree: Tree, config: Config, force: bool) -> None:
    """A package's unit is changed with a drop-in: an install beside it would outlive the
    package (its /etc unit and links then require a guard that is gone, and every suspend
    fails) and write over the hook the package owns."""
    shipped = next((d for d in UNIT_DIRS[1:] if tree.at(f"{d}/{UNIT_TEMPLATE}").exists()), None)
    if shipped is None or force:
        return
    raise InstallError(
        f"a package installed {shipped}/{UNIT_TEMPLATE}: change it with systemctl edit "
        f"{UNIT_TEMPLATE} ([Service] TimeoutStartSec={timeout_start_s(config)} for this "
        "config), not an install beside it, which would outlive the package (--force to "
        "install all the same)")


def command_uninstall(args: argparse.Namespace, ctx: Context) -> int:
    root = _root_of(args)
    if root is None:
        check_live_system()
    uninstall(root, purge=getattr(args, "purge", False), out=ctx.out, err=ctx.err)
    return 0
