"""Command line: ``suspendguard SUBCOMMAND``. ``main(argv)`` is testable in-process.

Exit statuses: 0 allow / success, 1 veto, 2 bad usage or configuration,
3 an operational error (not root, systemd not running, ...).
Heavy modules are imported by the subcommand that needs them, so the sleep
hook's path stays fast and never imports dbus-next or asyncio.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from . import __version__
from .config import Config, load
from .errors import EXIT_USAGE, SuspendGuardError, UsageError

SLEEP_ACTIONS = ("suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate")


@dataclass
class Context:
    """What every subcommand gets: where its config is and where to print."""

    config_arg: str | None
    out: TextIO
    err: TextIO
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    _config: Config | None = None

    def config(self) -> Config:
        if self._config is None:
            self._config = load(self.config_arg, self.environ)
        return self._config


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


Handler = Callable[[argparse.Namespace, Context], int]


def _cmd_check(args: argparse.Namespace, ctx: Context) -> int:
    from .commands import check

    return check(args, ctx)


def _cmd_pre_sleep(args: argparse.Namespace, ctx: Context) -> int:
    from .commands import pre_sleep

    return pre_sleep(args, ctx)


def _cmd_config(args: argparse.Namespace, ctx: Context) -> int:
    from .config import to_toml

    ctx.out.write(to_toml(ctx.config()))
    return 0


def _cmd_history(args: argparse.Namespace, ctx: Context) -> int:
    from .commands import history

    return history(args, ctx)


def _cmd_logs(args: argparse.Namespace, ctx: Context) -> int:
    from .logs.command import command

    return command(args, ctx)


def _cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    from .status import command

    return command(args, ctx)


def _cmd_install(args: argparse.Namespace, ctx: Context) -> int:
    from .install import command_install

    return command_install(args, ctx)


def _cmd_uninstall(args: argparse.Namespace, ctx: Context) -> int:
    from .install import command_uninstall

    return command_uninstall(args, ctx)


def _cmd_sleep_hook(args: argparse.Namespace, ctx: Context) -> int:
    from .hook import command

    return command(args, ctx)


def build_parser() -> argparse.ArgumentParser:
    config_help = "configuration file (default: $SUSPENDGUARD_CONFIG or /etc/suspendguard/config.toml)"
    # Accepted before or after the subcommand; SUPPRESS keeps the subcommand's
    # parser from overwriting a value given before it.
    common = _Parser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=config_help)
    parser = _Parser(
        prog="suspendguard",
        description="Pre-suspend guard for accelerator hosts (Ascend NPUs, NVIDIA GPUs).",
    )
    parser.add_argument("--config", metavar="PATH", default=None, help=config_help)
    parser.add_argument("--version", action="version", version=f"suspendguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    p = add("check", _cmd_check, "find holders, drain them (or not, with --dry-run), give a verdict")
    p.add_argument("--dry-run", action="store_true", help="send no signal; say what would happen")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = add("pre-sleep", _cmd_pre_sleep, "the veto unit's step: run the guard before ACTION")
    p.add_argument("action", nargs="?", default="suspend", choices=SLEEP_ACTIONS, metavar="ACTION",
                   help="suspend | hibernate | hybrid-sleep | suspend-then-hibernate")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    add("config", _cmd_config, "print the effective configuration as TOML")

    p = add("history", _cmd_history, "list recorded suspend attempts, newest first")
    p.add_argument("-n", type=int, default=20, metavar="N", help="how many (default 20)")
    p.add_argument("--json", action="store_true")

    p = add("logs", _cmd_logs, "scan Ascend device logs for documented failures")
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: [logs] paths)")
    p.add_argument("--since", metavar="T", help="ISO 8601 time, or last-attempt")
    p.add_argument("--until", metavar="T", help="ISO 8601 time")
    p.add_argument("--json", action="store_true")

    p = add("status", _cmd_status, "accelerators, holders, verdict, installation, logind, history")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--prometheus", action="store_true", help="text exposition format")

    p = add("install", _cmd_install, "install the veto units, the sleep hook and a default config")
    p.add_argument("--root", metavar="DIR",
                   help="stage into DIR (same layout under DIR; systemctl is never called)")
    p.add_argument("--no-enable", action="store_true", help="do not enable the units")

    p = add("uninstall", _cmd_uninstall, "remove what install put in place")
    p.add_argument("--root", metavar="DIR")
    p.add_argument("--purge", action="store_true",
                   help="also remove the config file and the history (kept by default)")

    p = add("sleep-hook", _cmd_sleep_hook, "called by systemd-sleep: sleep-hook pre|post ACTION")
    p.add_argument("phase", choices=("pre", "post"))
    p.add_argument("action", nargs="?", default="suspend")
    return parser


def _hook_parser() -> argparse.ArgumentParser:
    """Only sleep-hook's arguments: systemd-sleep waits on this path, keep it short."""
    parser = _Parser(prog="suspendguard sleep-hook")
    parser.add_argument("phase", choices=("pre", "post"))
    parser.add_argument("action", nargs="?", default="suspend")
    parser.add_argument("--config", metavar="PATH", default=None)
    parser.set_defaults(handler=_cmd_sleep_hook)
    return parser


def main(
    argv: Sequence[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["sleep-hook"]:
            args = _hook_parser().parse_args(argv[1:])
        else:
            args = build_parser().parse_args(argv)
        if not getattr(args, "handler", None):
            build_parser().print_usage(err)
            return EXIT_USAGE
        ctx = Context(args.config, out, err, dict(os.environ) if environ is None else environ)
        handler: Handler = args.handler
        return handler(args, ctx)
    except SuspendGuardError as exc:
        err.write(f"suspendguard: {exc}\n")
        return exc.exit_status
    except KeyboardInterrupt:
        err.write("suspendguard: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
