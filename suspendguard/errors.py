"""The project's named failures and the exit statuses they map to."""

from __future__ import annotations

EXIT_ALLOW = 0
EXIT_VETO = 1
EXIT_USAGE = 2
EXIT_ERROR = 3


class SuspendGuardError(Exception):
    """An error a user can cause; printed as one line, never a traceback."""

    exit_status = EXIT_ERROR


class ConfigError(SuspendGuardError):
    """The configuration file is missing, unreadable or invalid."""

    exit_status = EXIT_USAGE


class UsageError(SuspendGuardError):
    """Bad command-line usage."""

    exit_status = EXIT_USAGE
