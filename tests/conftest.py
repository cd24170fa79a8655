"""The suite's entry: the plugin with every shared fixture, the isolation check, and the check
that no test wrote the host's own state folder."""

from __future__ import annotations

import os

import pytest
from helpers.isolation import NO_HOST_BUS, isolation_problem

from suspendguard.config.schema import DEFAULT_STATE_DIR

pytest_plugins = ["helpers.plugin"]

_host_state: dict[str, tuple[int, int]] | None = None


def _state_files() -> dict[str, tuple[int, int]] | None:
    """The host's state folder as (size, mtime) by name, or None where there is none. SQLite's
    shared-memory index is left out: a reader of the history (status) may touch it."""
    try:
        names = os.listdir(DEFAULT_STATE_DIR)
    except OSError:
        return None
    files = {}
    for name in names:
        if not name.endswith("-shm"):
            st = os.lstat(os.path.join(DEFAULT_STATE_DIR, name))
            files[name] = (st.st_size, st.st_mtime_ns)
    return files


def pytest_configure(config: pytest.Config) -> None:
    global _host_state
    problem = isolation_problem()
    if problem is not None:
        pytest.exit(f"run the suite through tools/test: as root the tests need a private PID "
                    f"namespace, so that a guard under test can signal only what they started "
                    f"({problem})", returncode=pytest.ExitCode.USAGE_ERROR)
    _host_state = _state_files()
    # The host's system bus is never asked: a guard under test that refuses a sleep tells
    # the users logind knows, who are this machine's real users. A test that wants a bus
    # makes its own (the bus fixture), or names one in its environ.
    os.environ.setdefault("DBUS_SYSTEM_BUS_ADDRESS", NO_HOST_BUS)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that wrote the host's state folder (its mode, its lock, its history) changed what
    a guard installed on this machine would do: the run fails and says so."""
    now = _state_files()
    if now != _host_state:
        changed = sorted(set(now or {}) ^ set(_host_state or {})
                         | {n for n in (now or {}) if (_host_state or {}).get(n) != (now or {})[n]})
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(f"a test wrote the host's state folder {DEFAULT_STATE_DIR}: "
                    f"{', '.join(changed)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
