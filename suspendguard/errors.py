"""The project's one exception tree and the exit statuses it maps to.

Every error a user can cause is a :class:`SuspendGuardError`; the CLI prints
its message as one line and exits with its ``exit_status`` (documented in
the README's command reference): 2 for usage and configuration, 3 for an
operational failure, 4 for a configuration root may not trust. A verdict has
its own: 0 allow, 1 veto, 5 unknown (the guard cannot tell;
model.VERDICT_EXIT_STATUS).
"""

from __future__ import annotations

EXIT_ALLOW = 0
EXIT_VETO = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_UNTRUSTED = 4
EXIT_UNKNOWN = 5


class SuspendGuardError(Exception):
    """An error a user can cause; printed as one line, never a traceback."""

    exit_status = EXIT_ERROR


class ConfigError(SuspendGuardError):
    """The configuration file is missing, unreadable or invalid (exit status 2)."""

    exit_status = EXIT_USAGE


class ConfigUntrusted(ConfigError):
    """Run as root, the configuration or a file it names could be changed by others (exit status 4).

    The guard refuses to act on it: no signal, no program it names run;
    before a suspend the refusal is a veto (the unit fails).
    """

    exit_status = EXIT_UNTRUSTED

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"refusing an untrusted configuration: {problems[0]}{more}; "
                         "root acts only on files that root alone can change")


class UsageError(SuspendGuardError):
    """Bad command-line usage (exit status 2)."""

    exit_status = EXIT_USAGE


class OperationalError(SuspendGuardError):
    """The system would not let a command do its work: not root, no systemd (exit status 3).

    The base of the install and uninstall errors.
    """

    exit_status = EXIT_ERROR


class OutputLost(OperationalError):
    """The command's output could not be written (a pipe whose reader left, a full disk):
    exit status 3, never the 0 of a verdict nobody could read."""

    def __init__(self, stream: str, exc: OSError) -> None:
        self.quiet = isinstance(exc, BrokenPipeError)  # the reader chose to stop
        super().__init__(f"cannot write to {stream}: {exc.strerror or exc}")


class HistoryError(OperationalError):
    """History could not be opened or written; the message is the reason.

    Every command catches it and goes on (history never changes a verdict);
    should one escape, it is an operational failure (exit status 3).
    """


class NoHistory(HistoryError):
    """There is no history database yet: an answer, not a failure."""


class InstallError(OperationalError):
    """Install or uninstall could not do its work (exit status 3)."""


class InstallUntrusted(InstallError):
    """What the units would run as root could be changed by others: the interpreter, or the
    guard's code it imports (exit status 4, as a configuration root may not trust)."""

    exit_status = EXIT_UNTRUSTED
