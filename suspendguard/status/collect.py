"""Gathering the status report: read-only and safe at any time, as root or not.

It runs the dry-run pipeline (no signal, nothing recorded), reads the
installation, asks logind and systemd over D-Bus, and reads the history.
Each part that cannot be had here (no bus, not root, no state yet, an
invalid config) is :class:`~suspendguard.model.Unavailable` with why, and
the report is still made.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from suspendguard.config import Config, defaults, load, resolve_path
from suspendguard.doctor.checks import doctor
from suspendguard.doctor.host import Host
from suspendguard.errors import ConfigError, HistoryError, SuspendGuardError
from suspendguard.guard.pipeline import default_idle_check, run
from suspendguard.guard.report import Report
from suspendguard.guard.run import OnDemandOwnerControl, open_history
from suspendguard.idle.base import IdleReport
from suspendguard.install.installed import read_installation
from suspendguard.install.templates import instance
from suspendguard.model import SLEEP_ACTIONS, Unavailable
from suspendguard.status.model import ConfigStatus, HistoryStatus, RecentHistory, StateDir, Status
from suspendguard.store import mode as guard_mode
from suspendguard.store import progress
from suspendguard.store.history import DB_NAME, History
from suspendguard.system.dbus.bus import system_bus_address
from suspendguard.system.dbus.logind import logind_info
from suspendguard.system.dbus.systemd import UnitInfo, unit_info
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

if TYPE_CHECKING:
    from suspendguard.guard.run_state import IdleCheck

# Enough to see a pattern, short enough for a terminal.
HISTORY_ATTEMPTS = 5
DBUS_TIMEOUT_S = 2.0


def _load_config(config_arg: str | None, environ: Mapping[str, str]) -> tuple[Config, ConfigStatus]:
    """The configuration to use (the defaults when the file is invalid) and what status says of it."""
    path, explicit = resolve_path(config_arg, environ)
    try:
        config = load(config_arg, environ)
    except ConfigError as exc:
        return defaults(), ConfigStatus(path, explicit, Unavailable(str(exc)))
    return config, ConfigStatus(config.path or path, explicit, config)


def _mode_dir(config: Config, state: ConfigStatus) -> str:
    """Where pre-sleep reads the mode: the unit's own folder while the configuration cannot
    be loaded (invalid, or untrusted by root), as `mode` writes it then."""
    return config.state.dir if state.valid and not config.trust else defaults().state.dir


def _state_dir(path: str) -> StateDir:
    exists = os.path.isdir(path)
    return StateDir(path, exists, exists and os.access(path, os.W_OK | os.X_OK),
                    not_a_folder=not exists and os.path.lexists(path))


def _history(state_dir: str, n: int, config_path: str | None) -> HistoryStatus:
    """The recent attempts; ``config_path`` goes into the restore commands status prints."""
    where = os.path.join(state_dir, DB_NAME)
    try:
        with History.open(state_dir, readonly=True) as h:
            recent = RecentHistory(tuple(h.attempts(n, include_dry_run=False)), h.counts(),
                                   h.finding_counts(), tuple(h.not_restored()),
                                   tuple(h.last_health()), tuple(h.notes))
    except HistoryError as exc:
        return HistoryStatus(where, Unavailable(str(exc)), config_path)
    except OSError as exc:  # an unreadable state dir is an answer, not a crash
        return HistoryStatus(where, Unavailable(f"cannot read {where}: {exc.strerror or exc}"),
                            config_path)
    return HistoryStatus(where, recent, config_path)


def _units(timeout: float, address: str) -> Mapping[str, UnitInfo] | Unavailable:
    return unit_info([instance(a) for a in SLEEP_ACTIONS], timeout, address)


def _pipeline(config: Config, environ: Mapping[str, str], proc: ProcFS | None,
              idle_check: IdleCheck | None) -> Report | Unavailable:
    """The verdict ``check`` gives now: its dry run, made as ``check`` makes it. The owners
    are read through their supervisors (a holder in a transient user unit vetoes, which its
    cgroup's name does not tell), and the history is read, never written (a holder an
    earlier attempt signalled, still saving, is not signalled again)."""
    try:
        return run(config, dry_run=True, record=False, origin="status", proc=proc,
                   idle_check=idle_check, log=Logger(io.StringIO(), {}, quiet=True),
                   supervisors=OnDemandOwnerControl(environ, config.state.dir),
                   history=open_history)
    except (SuspendGuardError, OSError) as exc:
        return Unavailable(f"the dry run could not be made: {exc}")


def collect(
    config_arg: str | None,
    environ: Mapping[str, str],
    *,
    root: str = "/",
    proc: ProcFS | None = None,
    idle_check: IdleCheck | None = default_idle_check,
    dbus_timeout: float = DBUS_TIMEOUT_S,
    history_attempts: int = HISTORY_ATTEMPTS,
) -> Status:
    """Gather every part; D-Bus answers are awaited while the dry run goes on.

    ``config_arg`` and ``environ`` are the CLI's (``--config``, and the
    environment that names the config file and the system bus).
    """
    started = time.time()
    clock = time.monotonic()
    config, config_state = _load_config(config_arg, environ)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2,
                                               thread_name_prefix="suspendguard-status") as pool:
        # The bus the caller's environment names (the CLI's, not only this
        # process's: tests and wrappers hand one in).
        bus = system_bus_address(environ)
        logind_f = pool.submit(logind_info, dbus_timeout, bus)
        units_f = pool.submit(_units, dbus_timeout, bus)
        # An untrusted config may name the programs the idle backends run:
        # status reports on it, and runs none of them.
        report = _pipeline(config, environ, proc, None if config.trust else idle_check)
        installation = read_installation(root)
        state_dir = _state_dir(config.state.dir)
        history = _history(config.state.dir, history_attempts,
                           config_state.path if config_state.explicit else None)
        logind = logind_f.result()
        units = units_f.result()
    findings = tuple(doctor(Host(root), config, _vram_mb(report)))
    return Status(started, os.geteuid(), config_state, report, installation, state_dir,
                  logind, units, history, time.monotonic() - clock, config.devices.families,
                  guard_mode.shown(_mode_dir(config, config_state)), findings,
                  progress.current(config.state.dir, proc))


def _vram_mb(report: Report | Unavailable) -> float | None:
    """The video memory in use, as the dry run's idle readings saw it (for doctor's checks)."""
    if isinstance(report, Unavailable) or not isinstance(report.idle, IdleReport):
        return None
    used = [d.readings.get("memory_used_mb") for d in report.idle.devices
            if d.family == "nvidia"]
    known = [u for u in used if u is not None]
    return sum(known) if known else None
