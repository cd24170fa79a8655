"""``suspendguard retry ACTION --attempt ID [--for S]``: ask for a vetoed sleep again once its cause cleared.

Run by the transient unit ``suspendguard-retry-ACTION.service`` that the
veto unit starts (``[notify] retry = true``) after a veto whose causes end
by themselves; guard/retry.py says which, and while what. It outlives the
veto unit, which must answer within its deadline; one such unit at a time
(systemd refuses a second of the same name while the first runs).
"""

from __future__ import annotations

import argparse
import sys

from suspendguard.commands.context import Context
from suspendguard.commands.history import MAX_N
from suspendguard.commands.suspend import FOLLOW_MARGIN_S, unit_attempt
from suspendguard.config import Config
from suspendguard.errors import HistoryError, OperationalError, UsageError
from suspendguard.guard.ready import dry_look
from suspendguard.guard.retry import RETRY_FOR_S, retry, why_not_retried
from suspendguard.model import Unavailable
from suspendguard.record import Attempt
from suspendguard.store.history import History
from suspendguard.system.dbus.bus import system_bus_address
from suspendguard.system.dbus.logind import request_sleep
from suspendguard.system.dbus.transient import TransientSpec, start_transient
from suspendguard.system.dbus.wish import logind_wish
from suspendguard.system.log import Logger

# The veto unit's wait for systemd to take the retry unit: inside its answer margin.
START_S = 1.5


def retry_unit(action: str) -> str:
    return f"suspendguard-retry-{action}.service"


def retry_enabled(config: Config) -> bool:
    """``[notify] retry``: off unless the configuration turns it on."""
    return config.notify.retry


def offer_retry(ctx: Context, action: str, since: float, log: Logger) -> None:
    """After the veto unit's veto: start the retry unit when ``[notify] retry`` is on and the
    veto's causes end by themselves. Never changes the veto; a failure is a warning."""
    config = ctx.config()
    if not retry_enabled(config):
        return
    found = unit_attempt(config, action, since)
    if not isinstance(found, Attempt):
        log.warning(f"no retry: {found}")
        return
    why = why_not_retried(found)
    if why is not None:
        log.info(f"no retry: {why}")
        return
    # -I as every root entry point: no cwd on sys.path, no PYTHON* variables, no user site.
    argv = (sys.executable, "-I", "-m", "suspendguard", "retry", action, "--attempt",
            str(found.id), "--for", f"{RETRY_FOR_S:g}") + (
        ("--config", config.path) if config.path else ())
    # Unloaded even when it gave up (exit 1) or failed: else the next veto's retry is refused
    # by name until someone runs systemctl reset-failed.
    spec = TransientSpec(
        description=f"suspendguard: {action} again once the veto of attempt {found.id} cleared",
        exec_start=((sys.executable, argv, False),), environment=(), working_directory="",
        user="", group="", restart="no", restart_usec=0, slice="", service_type="exec",
        kill_mode="", kill_signal=15, collect_mode="inactive-or-failed")
    got = start_transient(retry_unit(action), spec, timeout=START_S,
                          address=system_bus_address(ctx.environ))
    if isinstance(got, Unavailable):
        log.warning(f"no retry: {retry_unit(action)} could not be started "
                    f"(one already waiting?): {got.reason}")
    else:
        log.notice(f"{retry_unit(action)} will ask for the {action} again once the cause has "
                   f"cleared, while logind still wants it (at most {RETRY_FOR_S:g} s)")


def command(args: argparse.Namespace, ctx: Context) -> int:
    config = ctx.config()
    action: str = args.action
    address = system_bus_address(ctx.environ)
    log = Logger(ctx.err, ctx.environ)
    if not 1 <= args.attempt <= MAX_N:  # past SQLite's INTEGER, its read would overflow
        raise UsageError(f"retry: --attempt {args.attempt}: give an attempt's ID "
                         "(suspendguard history lists them)")
    try:
        with History.open(config.state.dir, readonly=True) as history:
            attempt = history.attempt(args.attempt)
    except HistoryError as exc:
        raise OperationalError(f"retry: the history cannot be read: {exc}") from exc
    if attempt is None:
        raise OperationalError(f"retry: no attempt {args.attempt} in {config.state.dir}")

    def latest(since: float) -> Attempt | None:
        found = unit_attempt(config, action, since)
        return found if isinstance(found, Attempt) else None

    result = retry(
        attempt, action, args.bound, look=dry_look(config, ctx.environ),
        wish=lambda: logind_wish(address=address),
        request=lambda a: request_sleep(a, config.drain.deadline_s + FOLLOW_MARGIN_S, address),
        latest=latest, say=log.info)
    (log.notice if result.status == 0 else log.warning)(result.line)
    return result.status
