"""Command line: ``suspendguard COMMAND``; the parser from the command table, lazy dispatch.

``main(argv)`` is testable in-process. The commands, their arguments and
their exit statuses are declared in :mod:`suspendguard.commands`; a
command's implementation is imported only when it runs (the project's one
lazy-import boundary), so ``--help`` and the sleep hook never import
dbus-next or asyncio.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, TextIO, cast

from suspendguard import __version__
from suspendguard.commands import BY_NAME, COMMANDS, Command, exits_text
from suspendguard.commands.context import Context
from suspendguard.errors import (
    EXIT_ERROR,
    EXIT_USAGE,
    OutputLost,
    SuspendGuardError,
    UsageError,
)
from suspendguard.system.terminal import discard, safe

Handler = Callable[[argparse.Namespace, Context], int]

CONFIG_HELP = "configuration file (default: $SUSPENDGUARD_CONFIG or /etc/suspendguard/config.toml)"
EXITS = (
    (0, "allow, success"),
    (1, "veto; logs: findings"),
    (2, "bad usage or configuration"),
    (3, "operational error (not root, no systemd, logind refused, the output could not be "
        "written, ...)"),
    (4, "run as root, the configuration could be changed by others: refused"),
    (5, "unknown: the guard cannot tell (check, drain, pre-sleep); never read as allow"),
    (130, "interrupted"),
)
# The run-time dependencies, each imported only where a run needs it: a missing one is
# said by the name it is installed under (pip, then Debian), never as a traceback.
DEPENDENCIES = {
    "dbus_next": ("dbus-next", "python3-dbus-next"),
    "prometheus_client": ("prometheus-client", "python3-prometheus-client"),
    "tomli": ("tomli", "python3-tomli"),
}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one-line UsageErrors (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        where = self.prog.removeprefix("suspendguard").strip()
        raise UsageError(f"{where}: {message}" if where else message)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: Any = None) -> Any:
        """argparse's, but what is left over is named with the command it was given to
        (the subparsers leave it to the top parser, whose prog names none)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            steps = [getattr(parsed, k, None) for k in ("command", "slurm_command", "node_command")]
            where = " ".join(s for s in steps if s)
            raise UsageError((f"{where}: " if where else "")
                             + f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, just that command's subparser is built
    (the guard runs on the suspend path, and argparse's set-up is a large part
    of a short run)."""
    # Accepted before or after the command; SUPPRESS keeps the command's
    # parser from overwriting a value given before it.
    common = Parser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=CONFIG_HELP)
    parser = Parser(
        prog="suspendguard",
        description="Pre-suspend guard for accelerator hosts (Ascend NPUs, NVIDIA GPUs).",
        epilog=exits_text(EXITS) + "\n\n'suspendguard COMMAND --help' tells more.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="PATH", default=None, help=CONFIG_HELP)
    parser.add_argument("--version", action="version", version=f"suspendguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in COMMANDS:
        if only is not None and command.name != only:
            continue
        p = sub.add_parser(command.name, parents=[common], help=command.help,
                           description=command.help, epilog=command.epilog(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        command.arguments(p)
        _config_in_steps(p)
        p.set_defaults(command_entry=command)
    return parser


def _config_in_steps(parser: argparse.ArgumentParser) -> None:
    """--config after a command's own steps too (``slurm health --config PATH``), as after
    every command: each nested subparser takes it, never overwriting one given before."""
    for action in parser._actions:  # argparse's one way to its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for step in action.choices.values():
                if not any("--config" in a.option_strings for a in step._actions):
                    step.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                                      help=CONFIG_HELP)
                _config_in_steps(step)


def handler_of(command: Command) -> Handler:
    """The command's implementation, imported now: the one lazy import."""
    module, _, function = command.target.partition(":")
    handler: Handler = getattr(importlib.import_module(f"suspendguard.commands.{module}"),
                               function)
    return handler


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named in argv, when it is certain; None builds every parser."""
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
            return arg if arg in BY_NAME else None
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
                           command_entry=BY_NAME["sleep-hook"])


def _parse(argv: list[str], out: TextIO) -> Any:
    if argv[:1] == ["sleep-hook"] and not {"-h", "--help"} & set(argv):
        return _hook_args(argv[1:])
    with contextlib.redirect_stdout(out):  # --help and --version print there
        return build_parser(_command_in(argv)).parse_args(argv)


class _Guarded:
    """A standard stream whose failed write or flush ends the command (``OutputLost``)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputLost(self._name, exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(self._name, exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _say(err: TextIO, line: str) -> None:
    """The command's last line, where stderr still takes it."""
    with contextlib.suppress(OSError, ValueError):
        err.write(line + "\n")
        err.flush()


def _lost(exc: OutputLost, out: TextIO, err: TextIO) -> int:
    """What a lost output ends in: one line where stderr still takes it (none for a pipe
    whose reader left), and no second error when the interpreter flushes sys.stdout and
    sys.stderr at exit (where they are the streams, pointed at /dev/null)."""
    if not exc.quiet:
        _say(err, f"suspendguard: {exc}")
    for stream in {out, err} & {sys.stdout, sys.stderr}:
        discard(stream)
    return exc.exit_status


def _standard_fds() -> None:
    """0, 1 and 2 on /dev/null where they are closed: a file opened later must never be
    taken for a standard stream, by this process or by a child it starts."""
    fd = os.open(os.devnull, os.O_RDWR)
    while fd <= 2:  # the lowest free number: 0, 1 or 2 while one is closed
        fd = os.open(os.devnull, os.O_RDWR)
    os.close(fd)


def main(
    argv: Sequence[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: dict[str, str] | None = None,
    stdin: TextIO | None = None,
) -> int:
    # A closed stream (slurmctld closes every descriptor before its SuspendProgram and
    # ResumeProgram) is None in sys: what would go there goes nowhere, never a traceback.
    _standard_fds()
    raw_out = out or sys.stdout or open(os.devnull, "w")  # noqa: SIM115 (lives as long)
    raw_err = err or sys.stderr or open(os.devnull, "w")  # noqa: SIM115
    # A write that fails (a pipe whose reader left, a full disk) ends the command with exit
    # status 3: never the 0 of an allow, nor a traceback.
    out = cast(TextIO, _Guarded(raw_out, "the output"))
    err = cast(TextIO, _Guarded(raw_err, "standard error"))
    # A closed stdin reads as end of input (no terminal: drain refuses, exit status 2).
    stdin = stdin or sys.stdin or open(os.devnull)  # noqa: SIM115
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = _parse(argv, out)
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else 0
        command: Command | None = getattr(args, "command_entry", None)
        if command is None:  # no command: say which there are
            build_parser().print_help(out)
            return EXIT_USAGE
        if args.config == "":  # ("$UNSET"): never the default file in its place
            raise UsageError("--config: expected a PATH, got an empty string")
        ctx = Context(args.config, out, err, dict(os.environ) if environ is None else environ,
                      stdin=stdin)
        status = handler_of(command)(args, ctx)
        out.flush()  # what is still buffered fails here, not unseen at exit
        return status
    except OutputLost as exc:
        return _lost(exc, raw_out, raw_err)
    except SuspendGuardError as exc:
        # A path or a name from the command line, the environment or a config file may hold
        # a newline or an ESC: the error stays one line and moves no terminal's cursor.
        _say(raw_err, f"suspendguard: {safe(str(exc))}")
        return exc.exit_status
    except ModuleNotFoundError as exc:
        missing = DEPENDENCIES.get((exc.name or "").partition(".")[0])
        if missing is None:
            raise
        _say(raw_err, f"suspendguard: the Python package {missing[0]} is not installed for "
             f"{sys.executable} (Debian: apt install {missing[1]})")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _say(raw_err, "suspendguard: interrupted")
        return 130
    except BrokenPipeError as exc:  # a stream written past the guard (print to sys.stdout)
        return _lost(OutputLost("the output", exc), raw_out, raw_err)
