"""The veto unit, the sleep hook and the optional watch: their names, where they go, their text.

The text is rendered from the shipped ``systemd/`` files: ``ExecStart=`` and
``PYTHON=`` get the interpreter install runs under (so a virtual environment
works), ``TimeoutStartSec=`` (and the watch's ``WatchdogSec=``) gets
``[drain] deadline_s`` plus 20 s.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from suspendguard.config import DEFAULT_STATE_DIR, ENV_VAR, Config
from suspendguard.errors import InstallError
from suspendguard.model import SLEEP_ACTIONS

# As in the unit's [Install] RequiredBy=, with %i as {}.
REQUIRED_BY = ("systemd-{}.service", "nvidia-{}.service")

UNIT_TEMPLATE = "suspendguard@.service"
HOOK_TEMPLATE = "system-sleep/suspendguard"
# Started again after resume: WantedBy= every sleep service, After= it.
RESUME_UNIT = "suspendguard-resume.service"
# Optional (install --watch): a logind sleep block while the guard would veto.
WATCH_UNIT = "suspendguard-watch.service"

UNIT_DIR = "/etc/systemd/system"
UNIT_PATH = f"{UNIT_DIR}/{UNIT_TEMPLATE}"
RESUME_PATH = f"{UNIT_DIR}/{RESUME_UNIT}"
WATCH_PATH = f"{UNIT_DIR}/{WATCH_UNIT}"
# What ``systemctl enable`` makes from the watch's WantedBy=multi-user.target.
WATCH_LINK = f"{UNIT_DIR}/multi-user.target.wants/{WATCH_UNIT}"
HOOK_DIR = "/usr/lib/systemd/system-sleep"
HOOK_PATH = f"{HOOK_DIR}/suspendguard"

# Where read_installation also looks: a distribution package ships the unit
# and its static links in /usr/lib, and /lib is /usr/lib before the usr merge.
UNIT_DIRS = (UNIT_DIR, "/usr/lib/systemd/system", "/lib/systemd/system")
HOOK_DIRS = (HOOK_DIR, "/lib/systemd/system-sleep")

TIMEOUT_MARGIN_S = 20


def instance(action: str) -> str:
    return f"suspendguard@{action}.service"


def required_by(action: str) -> tuple[str, ...]:
    """The units an instance is ``RequiredBy=``: the sleep step, and NVIDIA's preparation."""
    return tuple(name.format(action) for name in REQUIRED_BY)


def enable_link(action: str, unit: str | None = None) -> str:
    """The link ``systemctl enable`` makes for ``RequiredBy=unit`` (default: the sleep step)."""
    unit = unit or required_by(action)[0]
    return f"{UNIT_DIR}/{unit}.requires/{instance(action)}"


def enable_links(action: str) -> list[str]:
    return [enable_link(action, unit) for unit in required_by(action)]


def resume_links() -> list[str]:
    """The links ``systemctl enable`` makes for the resume unit's ``WantedBy=``."""
    return [f"{UNIT_DIR}/systemd-{a}.service.wants/{RESUME_UNIT}" for a in SLEEP_ACTIONS]


def render_resume(template: str, python: str, state_dir: str = DEFAULT_STATE_DIR,
                  config_path: str | None = None) -> str:
    """The resume unit for ``python``, writing the history in ``state_dir``."""
    lines = [f"ExecStart={_systemd_arg(python)} -I -m suspendguard restore"]
    if config_path is not None:
        lines.append(f'Environment="{ENV_VAR}={_env_value(config_path)}"')
    text = _replace_key(template, "ExecStart", lines, RESUME_UNIT)
    return _state_dir(text, state_dir, RESUME_UNIT)


def render_watch(template: str, python: str, timeout_s: int, state_dir: str = DEFAULT_STATE_DIR,
                 config_path: str | None = None) -> str:
    """The watch unit for ``python``: a look may take as long as a run, so may its start
    and the time between two watchdog pings."""
    lines = [f"ExecStart={_systemd_arg(python)} -I -m suspendguard watch"]
    if config_path is not None:
        lines.append(f'Environment="{ENV_VAR}={_env_value(config_path)}"')
    text = _replace_key(template, "ExecStart", lines, WATCH_UNIT)
    for key in ("TimeoutStartSec", "WatchdogSec"):
        text = _replace_key(text, key, [f"{key}={timeout_s}"], WATCH_UNIT)
    return _state_dir(text, state_dir, WATCH_UNIT)


def _state_dir(text: str, state_dir: str, what: str) -> str:
    if os.path.normpath(state_dir) == DEFAULT_STATE_DIR:
        return text
    # ProtectSystem=strict leaves only StateDirectory= writable; "-": a
    # missing folder must not fail the unit (and so veto every suspend).
    rw = [
        "StateDirectory=suspendguard",
        f"ReadWritePaths=-{_systemd_arg(os.path.normpath(state_dir), exec_line=False)}",
    ]
    return _replace_key(text, "StateDirectory", rw, what)


def timeout_start_s(config: Config) -> int:
    return math.ceil(config.drain.deadline_s) + TIMEOUT_MARGIN_S


def template_dir(package: Path | None = None) -> Path:
    """The shipped ``systemd/`` folder: package data first, then the checkout."""
    here = package or Path(__file__).resolve().parents[1]
    for candidate in (here / "data" / "systemd", here.parent / "systemd"):
        if (candidate / UNIT_TEMPLATE).is_file() and (candidate / HOOK_TEMPLATE).is_file():
            return candidate
    raise InstallError(
        f"the shipped unit files are missing (looked for {UNIT_TEMPLATE} in "
        f"{here / 'data' / 'systemd'} and {here.parent / 'systemd'})"
    )


def _systemd_arg(arg: str, exec_line: bool = True) -> str:
    """One unit-file word: specifiers (and in ExecStart= variables) escaped, quoted if needed."""
    out = arg.replace("%", "%%")
    if exec_line:
        out = out.replace("$", "$$")
    if re.search(r"[\s\"'\\;]", out):
        out = '"' + out.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return out


def _env_value(value: str) -> str:
    return value.replace("%", "%%").replace("$", "$$").replace("\\", "\\\\").replace('"', '\\"')


def _replace_key(text: str, key: str, lines: Sequence[str], what: str) -> str:
    pattern = re.compile(rf"^{re.escape(key)}=.*$", re.MULTILINE)
    found = pattern.findall(text)
    if len(found) != 1:
        raise InstallError(f"{what}: expected exactly one {key}= line, found {len(found)}")
    return pattern.sub(lambda _m: "\n".join(lines), text)


def render_unit(
    template: str,
    python: str,
    timeout_s: int,
    state_dir: str = DEFAULT_STATE_DIR,
    config_path: str | None = None,
) -> str:
    """The veto unit for ``python``; ``config_path`` only when it is not the default."""
    exec_start = [f"ExecStart={_systemd_arg(python)} -I -m suspendguard pre-sleep %i"]
    if config_path is not None:
        exec_start.append(f'Environment="{ENV_VAR}={_env_value(config_path)}"')
    text = _replace_key(template, "ExecStart", exec_start, UNIT_TEMPLATE)
    text = _replace_key(text, "TimeoutStartSec", [f"TimeoutStartSec={timeout_s}"], UNIT_TEMPLATE)
    return _state_dir(text, state_dir, UNIT_TEMPLATE)


def render_hook(template: str, python: str, config_path: str | None = None) -> str:
    lines = [f"PYTHON={shlex.quote(python)}"]
    if config_path is not None:
        lines.append(f"export {ENV_VAR}={shlex.quote(config_path)}")
    return _replace_key(template, "PYTHON", lines, HOOK_TEMPLATE)

