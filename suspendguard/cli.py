"""Command line: ``suspendguard SUBCOMMAND``. ``main(argv)`` is testable in-process.

Exit statuses: 0 allow / success, 1 veto, 2 bad usage or configuration,
3 an operational error (not root, systemd not running, ...).
Heavy modules are imported by the subcommand that needs them, so the sleep
hook's path stays fast and never imports dbus-next or asyncio.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

from suspendguard import __version__
from suspendguard.commands.context import Context
from suspendguard.errors import EXIT_USAGE, SuspendGuardError, UsageError
from suspendguard.model import SLEEP_ACTIONS

if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO


def _parser(**kwargs: Any) -> argparse.ArgumentParser:
    """An ArgumentParser whose errors are one-line UsageErrors (exit status 2).

    argparse is imported here, not at the top: the sleep hook's path parses
    its three arguments by hand and never pays for it.
    """
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            where = self.prog.removeprefix("suspendguard").strip()
            raise UsageError(f"{where}: {message}" if where else message)

    return Parser(**kwargs)


Handler = Callable[["argparse.Namespace", Context], int]


def _cmd_check(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.check import check

    return check(args, ctx)


def _cmd_pre_sleep(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.check import pre_sleep

    return pre_sleep(args, ctx)


def _cmd_config(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.config import to_toml

    ctx.out.write(to_toml(ctx.config()))
    return 0


def _cmd_history(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.history import history

    return history(args, ctx)


def _cmd_logs(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.logs import command

    return command(args, ctx)


def _cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.status import command

    return command(args, ctx)


def _cmd_install(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.install import command_install

    return command_install(args, ctx)


def _cmd_uninstall(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.install import command_uninstall

    return command_uninstall(args, ctx)


def _cmd_sleep_hook(args: argparse.Namespace, ctx: Context) -> int:
    from suspendguard.commands.sleep_hook import command

    return command(args, ctx)


COMMANDS = ("check", "pre-sleep", "config", "history", "logs", "status", "install", "uninstall",
            "sleep-hook")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's (argparse's set-up is
    a large part of start-up, and the guard runs on the suspend path)."""
    config_help = "configuration file (default: $SUSPENDGUARD_CONFIG or /etc/suspendguard/config.toml)"
    # Accepted before or after the subcommand; SUPPRESS keeps the subcommand's
    # parser from overwriting a value given before it.
    import argparse

    common = _parser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=config_help)
    parser = _parser(
        prog="suspendguard",
        description="Pre-suspend guard for accelerator hosts (Ascend NPUs, NVIDIA GPUs).",
    )
    parser.add_argument("--config", metavar="PATH", default=None, help=config_help)
    parser.add_argument("--version", action="version", version=f"suspendguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return _parser(add_help=False)  # not used on this run
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
    p.add_argument("--unit", action="append", metavar="UNIT",
                   help="also read this systemd unit's journal (the job's own output); repeatable")
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


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv, when it is certain; None builds every parser."""
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--config":
            rest = rest[1:]
        elif arg.startswith("--config="):
            continue
        elif arg.startswith("-"):
            return None  # --help, --version, or an error argparse should word
        else:
            return arg if arg in COMMANDS else None
    return None


HOOK_USAGE = "usage: suspendguard sleep-hook pre|post [ACTION] [--config PATH]"


def _hook_args(argv: Sequence[str]) -> SimpleNamespace:
    """sleep-hook's arguments, by hand: systemd-sleep waits on this path."""
    rest = list(argv)
    config: str | None = None
    positional: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg == "--config":
            if not rest:
                raise UsageError(f"sleep-hook: --config needs a PATH ({HOOK_USAGE})")
            config = rest.pop(0)
        elif arg.startswith("--config="):
            config = arg.partition("=")[2]
        elif arg.startswith("-"):
            raise UsageError(f"sleep-hook: unknown option {arg} ({HOOK_USAGE})")
        else:
            positional.append(arg)
    if not positional or positional[0] not in ("pre", "post") or len(positional) > 2:
        raise UsageError(f"sleep-hook: expected pre or post, then the action ({HOOK_USAGE})")
    action = positional[1] if len(positional) > 1 else "suspend"
    return SimpleNamespace(phase=positional[0], action=action, config=config,
                           handler=_cmd_sleep_hook)


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
            args: Any = _hook_args(argv[1:])
        else:
            args = build_parser(_command_in(argv)).parse_args(argv)
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
