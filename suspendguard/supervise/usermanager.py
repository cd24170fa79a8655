"""A user's own systemd manager (``user@UID.service``): its private socket, and files as the user.

The guard asks the manager over its private socket,
``/run/user/UID/systemd/private``, through the same D-Bus calls as the
system manager (system/dbus/systemd.py): every property comes typed, the
spans in microseconds. A user's manager answers root there (systemd grants
a root sender on a manager that runs as another user, checked on
systemd 252), while the user's own bus, where there is one
(dbus-user-session), admits only the user. ``systemctl --user`` printed
the same spans as text ("1min 30s") and cost a child a call.

The drain drop-in and its marker are written by a child that drops to the
user's uid and primary gid (system/runner.py), into the user's own runtime
unit folder (``/run/user/UID/systemd/user/UNIT.d``): a file root made there
could not be removed by the unit's ``ExecStartPre=``, which runs as the user.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence

from suspendguard.model import Unavailable
from suspendguard.system import runner

TIMEOUT_S = 10.0


def runtime_dir(uid: int) -> str:
    return f"/run/user/{uid}"


def unit_dir(uid: int) -> str:
    """The user manager's runtime unit folder: drop-ins there last until the user's manager ends."""
    return f"{runtime_dir(uid)}/systemd/user"


def systemctl_line(uid: int, args: str) -> str:
    """``systemctl --user ARGS`` for uid's manager as an operator runs it from a root shell.

    The user's bus, where there is one, admits only the user; the guard's own
    way in, the manager's private socket, is not systemctl's.
    """
    return (f"setpriv --reuid={uid} --regid=$(id -g {uid}) --clear-groups "
            f"env XDG_RUNTIME_DIR={runtime_dir(uid)} systemctl --user {args}")


def _running(uid: int) -> pwd.struct_passwd | Unavailable:
    """uid's account, when the user exists and its manager runs."""
    try:
        account = pwd.getpwuid(uid)
    except KeyError:
        return Unavailable(f"uid {uid} has no user account")
    if not os.path.isdir(runtime_dir(uid)):
        return Unavailable(f"the manager of uid {uid} does not run ({runtime_dir(uid)} is absent)")
    return account


def manager_address(uid: int) -> str | Unavailable:
    """The D-Bus address of uid's manager; Unavailable when the user or its manager is absent."""
    account = _running(uid)
    if isinstance(account, Unavailable):
        return account
    return f"unix:path={runtime_dir(uid)}/systemd/private"


def run_as(uid: int, argv: Sequence[str], timeout: float = TIMEOUT_S,
           stdin: str | None = None) -> runner.RunResult | Unavailable:
    """``argv`` as the user, in its manager's environment; Unavailable when it could not run."""
    account = _running(uid)
    if isinstance(account, Unavailable):
        return account
    gid = account.pw_gid
    env = {"XDG_RUNTIME_DIR": runtime_dir(uid), "PATH": runner.DEFAULT_PATH, "LANG": "C.UTF-8"}
    result = runner.run(argv, timeout, env=env, stdin=stdin, as_user=(uid, gid))
    if not result.ok:
        why = result.describe_failure()
        if result.error == "permission denied":
            why += " (switching to the user needs CAP_SETUID and CAP_SETGID)"
        return Unavailable(f"as uid {uid}: {why}")
    return result


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
