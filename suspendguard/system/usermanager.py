"""A user's own systemd manager (``user@UID.service``): ``systemctl --user`` run as that user.

The user manager takes orders from its own uid only: root is refused on its
bus and on its private socket ("Operation not permitted", checked on
systemd 252), and ``systemctl --user --machine=USER@`` goes through
systemd-run and machined (it fails in a container booted with
``--register=no``, and costs a transient unit a call). So each call is a
``systemctl --user`` child that drops to the user's uid and primary gid
(system/runner.py) with ``XDG_RUNTIME_DIR=/run/user/UID``; systemctl
itself finds the manager's private socket or the user's bus there. A call
costs 10-50 ms.

The drain drop-in and its marker are written by such a child too, into the
user's own runtime unit folder (``/run/user/UID/systemd/user/UNIT.d``): a
file root made there could not be removed by the unit's ``ExecStartPre=``,
which runs as the user.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable, Mapping, Sequence

from suspendguard.model import Unavailable
from suspendguard.system import runner
from suspendguard.system.dbus.systemd import AfterStop, ServiceState

TIMEOUT_S = 10.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROPERTIES = ("Id,LoadState,ActiveState,Restart,RestartUSec,KillMode,ExecStop,TriggeredBy,Job,"
              "MainPID,TimeoutStopUSec,Transient")

# systemd's time spans as systemctl show prints them: "100ms", "1min 30s", "2h 5min".
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d|w)\b")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
           "w": 604800.0}


def runtime_dir(uid: int) -> str:
    return f"/run/user/{uid}"


def unit_dir(uid: int) -> str:
    """The user manager's runtime unit folder: drop-ins there last until the user's manager ends."""
    return f"{runtime_dir(uid)}/systemd/user"


def timespan_s(text: str) -> float:
    """A span as systemctl prints it, in seconds; 0 for "", "0" or "infinity"."""
    return sum(float(n) * _UNIT_S[u] for n, u in _SPAN.findall(text))


def systemctl(uid: int, *args: str, timeout: float = TIMEOUT_S,
              stdin: str | None = None) -> runner.RunResult | Unavailable:
    """``systemctl --user ARGS`` as user ``uid``; Unavailable when it could not run or failed."""
    return run_as(uid, ["systemctl", "--user", *args], timeout=timeout, stdin=stdin)


def run_as(uid: int, argv: Sequence[str], timeout: float = TIMEOUT_S,
           stdin: str | None = None, timed_out_ok: bool = False
           ) -> runner.RunResult | Unavailable:
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return Unavailable(f"uid {uid} has no user account")
    if not os.path.isdir(runtime_dir(uid)):
        return Unavailable(f"the manager of uid {uid} does not run ({runtime_dir(uid)} is absent)")
    env = {"XDG_RUNTIME_DIR": runtime_dir(uid), "PATH": PATH, "LANG": "C.UTF-8",
           "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
    result = runner.run(argv, timeout, env=env, stdin=stdin, as_user=(uid, gid))
    if result.timed_out and timed_out_ok:
        return result
    if not result.ok:
        why = result.describe_failure()
        if result.error == "permission denied":
            why += " (switching to the user needs CAP_SETUID and CAP_SETGID)"
        return Unavailable(f"as uid {uid}: {why}")
    return result


def _blocks(text: str) -> list[dict[str, str]]:
    """systemctl show's output: one block of KEY=VALUE lines a unit, blank lines between."""
    out: list[dict[str, str]] = []
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props:
            out.append(props)
    return out


def _jobs(uid: int) -> dict[str, str] | Unavailable:
    """Each unit with a queued job, and the job's type."""
    result = systemctl(uid, "list-jobs", "--no-legend", "--plain")
    if isinstance(result, Unavailable):
        return result
    out = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            out[fields[1]] = fields[2]
    return out


def service_states(uid: int, names: Sequence[str]) -> dict[str, ServiceState] | Unavailable:
    """Each user service's restart settings and state, as system/dbus/systemd.py gives them."""
    wanted = list(dict.fromkeys(names))
    result = systemctl(uid, "show", "-p", PROPERTIES, *wanted)
    if isinstance(result, Unavailable):
        return result
    blocks = {b.get("Id", ""): b for b in _blocks(result.stdout)}
    jobs: dict[str, str] = {}
    if any(b.get("Job") for b in blocks.values()):
        found = _jobs(uid)
        if isinstance(found, Unavailable):
            return found
        jobs = found
    out = {}
    for name in wanted:
        b = blocks.get(name, {})
        out[name] = ServiceState(
            name=name, load_state=b.get("LoadState", "not-found"),
            active_state=b.get("ActiveState", "inactive"), restart=b.get("Restart", ""),
            restart_delay_s=timespan_s(b.get("RestartUSec", "")),
            kill_mode=b.get("KillMode", ""), exec_stop=bool(b.get("ExecStop")),
            triggered_by=tuple(b.get("TriggeredBy", "").split()),
            job=jobs.get(name, "?") if b.get("Job") else "", next_elapse={},
            main_pid=int(b.get("MainPID") or 0) if (b.get("MainPID") or "0").isdigit() else 0,
            timeout_stop_s=timespan_s(b.get("TimeoutStopUSec", "")),
            transient=b.get("Transient") == "yes")
    return out


def reload(uid: int) -> Unavailable | None:
    result = systemctl(uid, "daemon-reload", timeout=30.0)
    return result if isinstance(result, Unavailable) else None


def start(uid: int, name: str, wait: bool = True) -> str | Unavailable:
    """Start a unit; with ``wait``, the unit's ActiveState once the start job ended,
    "starting" when it still ran as the wait (cut to the guard's deadline) ended."""
    result = run_as(uid, ["systemctl", "--user", "start", *(() if wait else ("--no-block",)),
                          name], timeout=60.0, timed_out_ok=True)
    if isinstance(result, Unavailable):
        return result
    if result.timed_out:
        return "starting"  # systemctl was stopped; the start job runs on in the manager
    if not wait:
        return "queued"
    state = systemctl(uid, "show", "-p", "ActiveState", "--value", name)
    return state if isinstance(state, Unavailable) else state.stdout.strip()


def after_stop(uid: int, timers: Mapping[str, Sequence[str]], until: float,
               clock: Callable[[], float], sleep: Callable[[float], None],
               ) -> dict[str, AfterStop] | Unavailable:
    """Each unit once it is no longer stopping, or ``until`` (on ``clock``) has passed."""
    names = list(dict.fromkeys(timers))
    while True:
        states = service_states(uid, names)
        if isinstance(states, Unavailable):
            return states
        stopping = [s for s in states.values() if s.job == "stop"
                    or s.active_state == "deactivating"]
        if not stopping or clock() >= until:
            break
        sleep(0.01)
    out = {}
    for name in names:
        elapse = {}
        for timer in (t for t in timers[name] if t.endswith(".timer")):
            shown = systemctl(uid, "show", "-p", "NextElapseUSecMonotonic", "--value", timer)
            if not isinstance(shown, Unavailable) and timespan_s(shown.stdout):
                elapse[timer] = timespan_s(shown.stdout)
        st = states[name]
        out[name] = AfterStop(name, st.active_state, st.job, tuple(timers[name]), elapse)
    return out


def write_file(uid: int, path: str, text: str) -> Unavailable | None:
    """Write ``path`` as the user (its folder made if missing), replacing it in one step."""
    result = run_as(uid, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1.tmp" && '
                                      'mv -f "$1.tmp" "$1"', "sh", path], stdin=text)
    return result if isinstance(result, Unavailable) else None


def existing(uid: int, paths: Sequence[str]) -> list[str] | Unavailable:
    """Which of ``paths`` exist, as the user sees them (``/run/user/UID`` is the user's alone)."""
    result = run_as(uid, ["sh", "-c", 'for f; do [ -e "$f" ] && echo "$f"; done; true', "sh",
                          *paths])
    return result if isinstance(result, Unavailable) else result.stdout.splitlines()


def remove_files(uid: int, paths: Sequence[str]) -> list[str] | Unavailable:
    """Remove ``paths`` as the user, then their folders where left empty; the paths removed."""
    result = run_as(uid, ["sh", "-c", 'for f; do [ -e "$f" ] && rm -f "$f" && echo "$f"; done; '
                          "true", "sh", *paths])
    if isinstance(result, Unavailable):
        return result
    run_as(uid, ["rmdir", "--ignore-fail-on-non-empty",
                 *sorted({os.path.dirname(p) for p in paths})])
    return result.stdout.splitlines()
