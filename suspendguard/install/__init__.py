"""Install and remove the veto unit, the sleep hook and a default configuration.

The layout is the same for the running system and for ``--root DIR`` (then
every path lies under DIR), so a staged tree is exactly what a live install
would leave:

- ``/etc/systemd/system/suspendguard@.service``: the veto unit. /etc, not
  /usr/lib/systemd/system: this is the administrator's local install, and
  /usr/lib belongs to the package manager (systemd reads both).
- ``/etc/systemd/system/systemd-ACTION.service.requires/suspendguard@ACTION.service``
  and the same under ``nvidia-ACTION.service.requires``: the enable links,
  what ``systemctl enable`` makes from ``RequiredBy=``.
- ``/usr/lib/systemd/system-sleep/suspendguard``: the hook (systemd-sleep
  reads no other folder).
- ``/etc/suspendguard/config.toml``: the commented defaults, only when no
  file is there; an operator's file is never overwritten.
- the ``[state] dir`` (default ``/var/lib/suspendguard``): the history.
- ``/var/lib/suspendguard/installed.json``: the manifest. Uninstall removes
  what it lists and nothing else; a file changed since install is left in
  place with a warning. The config and the history stay unless ``--purge``.

The unit and the hook are rendered from the shipped ``systemd/`` files:
``ExecStart=`` and ``PYTHON=`` get the interpreter install runs under (so a
virtual environment works), ``TimeoutStartSec=`` gets ``[drain] deadline_s``
plus 20 s. Live, install runs ``systemctl daemon-reload`` and
``systemctl enable`` for the four instances (unless ``--no-enable``); with
``--root`` it makes the enable links itself and never calls systemctl.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from suspendguard.config import DEFAULT_PATH, ENV_VAR, Config, commented_default, load, resolve_path
from suspendguard.errors import SuspendGuardError
from suspendguard.model import SLEEP_ACTIONS
from suspendguard.system import runner

if TYPE_CHECKING:
    from suspendguard.commands.context import Context

# As in the unit's [Install] RequiredBy=, with %i as {}.
REQUIRED_BY = ("systemd-{}.service", "nvidia-{}.service")

UNIT_TEMPLATE = "suspendguard@.service"
HOOK_TEMPLATE = "system-sleep/suspendguard"

UNIT_DIR = "/etc/systemd/system"
UNIT_PATH = f"{UNIT_DIR}/{UNIT_TEMPLATE}"
HOOK_DIR = "/usr/lib/systemd/system-sleep"
HOOK_PATH = f"{HOOK_DIR}/suspendguard"
MANIFEST_PATH = "/var/lib/suspendguard/installed.json"
DEFAULT_STATE_DIR = "/var/lib/suspendguard"
SYSTEMD_RUN_DIR = "/run/systemd/system"

# Where installation_state also looks: a distribution package ships the unit
# and its static links in /usr/lib, and /lib is /usr/lib before the usr merge.
UNIT_DIRS = (UNIT_DIR, "/usr/lib/systemd/system", "/lib/systemd/system")
HOOK_DIRS = (HOOK_DIR, "/lib/systemd/system-sleep")

TIMEOUT_MARGIN_S = 20
SYSTEMCTL_TIMEOUT_S = 60.0
MANIFEST_VERSION = 1


class InstallError(SuspendGuardError):
    """Install or uninstall could not do its work (exit status 3)."""


class NotRootError(InstallError):
    """Installing into the running system needs root."""


class SystemdNotRunningError(InstallError):
    """Installing into the running system needs a running systemd."""


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


def timeout_start_s(config: Config) -> int:
    return math.ceil(config.drain.deadline_s) + TIMEOUT_MARGIN_S


# --- templates ------------------------------------------------------------


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
    if os.path.normpath(state_dir) != DEFAULT_STATE_DIR:
        # ProtectSystem=strict leaves only StateDirectory= writable; "-": a
        # missing folder must not fail the unit (and so veto every suspend).
        rw = [
            "StateDirectory=suspendguard",
            f"ReadWritePaths=-{_systemd_arg(os.path.normpath(state_dir), exec_line=False)}",
        ]
        text = _replace_key(text, "StateDirectory", rw, UNIT_TEMPLATE)
    return text


def _env_value(value: str) -> str:
    return value.replace("%", "%%").replace("$", "$$").replace("\\", "\\\\").replace('"', '\\"')


def render_hook(template: str, python: str, config_path: str | None = None) -> str:
    lines = [f"PYTHON={shlex.quote(python)}"]
    if config_path is not None:
        lines.append(f"export {ENV_VAR}={shlex.quote(config_path)}")
    return _replace_key(template, "PYTHON", lines, HOOK_TEMPLATE)


# --- the manifest -----------------------------------------------------------


@dataclass
class Manifest:
    """What install put in place; paths as the target system sees them."""

    files: dict[str, str] = field(default_factory=dict)  # path -> sha256
    links: dict[str, str] = field(default_factory=dict)  # path -> target
    dirs: list[str] = field(default_factory=list)  # created by install
    config_path: str = DEFAULT_PATH
    config_created: bool = False
    state_dir: str = DEFAULT_STATE_DIR
    state_dir_created: bool = False
    python: str = ""
    installed_at: str = ""

    def to_json(self) -> str:
        data = {
            "version": MANIFEST_VERSION,
            "python": self.python,
            "installed_at": self.installed_at,
            "files": dict(sorted(self.files.items())),
            "links": dict(sorted(self.links.items())),
            "dirs": sorted(set(self.dirs)),
            "config": {"path": self.config_path, "created": self.config_created},
            "state_dir": {"path": self.state_dir, "created": self.state_dir_created},
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            data = json.loads(text)
            config = data.get("config", {})
            state = data.get("state_dir", {})
            return cls(
                files={str(k): str(v) for k, v in data.get("files", {}).items()},
                links={str(k): str(v) for k, v in data.get("links", {}).items()},
                dirs=[str(d) for d in data.get("dirs", [])],
                config_path=str(config.get("path", DEFAULT_PATH)),
                config_created=bool(config.get("created", False)),
                state_dir=str(state.get("path", DEFAULT_STATE_DIR)),
                state_dir_created=bool(state.get("created", False)),
                python=str(data.get("python", "")),
                installed_at=str(data.get("installed_at", "")),
            )
        except (ValueError, AttributeError, TypeError) as exc:
            raise InstallError(f"{where}: unreadable install manifest ({exc})") from None


class _Tree:
    """Paths of the target system, under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def show(self, path: str) -> str:
        return str(self.at(path))

    def read_manifest(self) -> Manifest | None:
        where = self.at(MANIFEST_PATH)
        try:
            text = where.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InstallError(f"{where}: cannot read the install manifest ({exc.strerror})") from None
        return Manifest.from_json(text, str(where))

    def makedirs(self, path: str, manifest: Manifest) -> None:
        """mkdir -p, recording every folder it made so uninstall can remove it."""
        try:
            # A staging root that does not exist yet is made (not recorded:
            # it is the caller's folder, not part of the installed tree).
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InstallError(f"{self.root}: cannot create ({exc.strerror})") from None
        missing: list[str] = []
        current = os.path.normpath(path)
        while current != "/" and not self.at(current).exists():
            missing.append(current)
            current = os.path.dirname(current)
        for folder in reversed(missing):
            try:
                self.at(folder).mkdir(mode=0o755)
            except FileExistsError:
                continue
            except OSError as exc:
                raise InstallError(f"{self.at(folder)}: cannot create ({exc.strerror})") from None
            if folder not in manifest.dirs:
                manifest.dirs.append(folder)

    def write(self, path: str, text: str, mode: int, manifest: Manifest | None) -> None:
        target = self.at(path)
        tmp = target.with_name(f".{target.name}.suspendguard-tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise InstallError(f"{target}: cannot write ({exc.strerror})") from None
        if manifest is not None:
            manifest.files[path] = _sha256(text.encode())

    def save_manifest(self, manifest: Manifest) -> None:
        self.makedirs(os.path.dirname(MANIFEST_PATH), manifest)
        self.write(MANIFEST_PATH, manifest.to_json(), 0o644, None)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- checks -----------------------------------------------------------------


def check_live_system(euid: int | None = None, run_dir: str = SYSTEMD_RUN_DIR) -> None:
    """Raise unless this is root on a system booted with systemd."""
    if (os.geteuid() if euid is None else euid) != 0:
        raise NotRootError(
            "installing into the running system needs root (run with sudo, or stage with --root DIR)"
        )
    if not os.path.isdir(run_dir):
        raise SystemdNotRunningError(
            f"systemd is not running ({run_dir} is absent): nothing would run the units; "
            "stage the files with --root DIR instead"
        )


def _systemctl(*argv: str) -> None:
    result = runner.run(("systemctl", *argv), SYSTEMCTL_TIMEOUT_S)
    if not result.ok:
        raise InstallError(f"systemctl {' '.join(argv)} failed: {result.describe_failure()}")


def _config_for(ctx: Context, tree: _Tree | None) -> tuple[Config, str, bool]:
    """(config, its path in the target system, chosen explicitly)."""
    path, explicit = resolve_path(ctx.config_arg, ctx.environ)
    if tree is None:
        return ctx.config(), path, explicit
    staged = tree.at(path)
    if explicit or staged.exists():
        return load(str(staged), {}), path, explicit
    return load(None, {}), path, explicit


# --- install / uninstall --------------------------------------------------------


def install(
    root: str | None,
    config: Config,
    config_path: str,
    config_explicit: bool,
    enable: bool,
    python: str | None = None,
    out: TextIO | None = None,
) -> Manifest:
    """Put everything in place under ``root`` (None: the running system)."""
    live = root is None
    tree = _Tree(root or "/")
    python = os.path.abspath(python or sys.executable)
    templates = template_dir()
    unit_text = render_unit(
        (templates / UNIT_TEMPLATE).read_text(encoding="utf-8"),
        python,
        timeout_start_s(config),
        config.state.dir,
        config_path if config_explicit else None,
    )
    hook_text = render_hook(
        (templates / HOOK_TEMPLATE).read_text(encoding="utf-8"),
        python,
        config_path if config_explicit else None,
    )
    manifest = tree.read_manifest() or Manifest()
    manifest.python = python
    manifest.installed_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def say(line: str) -> None:
        if out is not None:
            out.write(line + "\n")

    tree.makedirs(UNIT_DIR, manifest)
    tree.write(UNIT_PATH, unit_text, 0o644, manifest)
    say(f"unit: {tree.show(UNIT_PATH)} (TimeoutStartSec={timeout_start_s(config)})")
    tree.makedirs(HOOK_DIR, manifest)
    tree.write(HOOK_PATH, hook_text, 0o755, manifest)
    say(f"hook: {tree.show(HOOK_PATH)}")

    if not tree.at(config_path).exists():
        tree.makedirs(os.path.dirname(config_path), manifest)
        tree.write(config_path, commented_default(), 0o644, None)
        manifest.config_created = True
        say(f"config: {tree.show(config_path)} (commented defaults)")
    else:
        say(f"config: {tree.show(config_path)} (kept as it is)")
    manifest.config_path = config_path

    state_dir = os.path.normpath(config.state.dir)
    if not tree.at(state_dir).exists():
        tree.makedirs(state_dir, manifest)
        manifest.state_dir_created = True
    elif manifest.state_dir != state_dir:
        manifest.state_dir_created = False
    manifest.state_dir = state_dir
    manifest.dirs = [d for d in manifest.dirs if d != state_dir]  # purge alone removes it
    tree.save_manifest(manifest)

    if live:
        _systemctl("daemon-reload")
    if enable:
        if live:
            _systemctl("enable", *(instance(a) for a in SLEEP_ACTIONS))
        for link in (link for action in SLEEP_ACTIONS for link in enable_links(action)):
            if live:
                # Recorded, so uninstall removes them: a link left to a removed unit
                # would fail nvidia-suspend.service, and the suspend with it.
                if tree.at(link).is_symlink():
                    manifest.links[link] = os.readlink(tree.at(link))
                    continue
                raise InstallError(f"systemctl enable made no link {link}")
            tree.makedirs(os.path.dirname(link), manifest)
            _symlink(tree.at(link), UNIT_PATH)
            manifest.links[link] = UNIT_PATH
        tree.save_manifest(manifest)
        say("enabled: " + " ".join(instance(a) for a in SLEEP_ACTIONS))
    say(f"manifest: {tree.show(MANIFEST_PATH)}")
    return manifest


def _symlink(path: Path, target: str) -> None:
    try:
        if path.is_symlink():
            if os.readlink(path) == target:
                return
            path.unlink()
        os.symlink(target, path)
    except OSError as exc:
        raise InstallError(f"{path}: cannot create the enable link ({exc.strerror})") from None


def uninstall(
    root: str | None, purge: bool, out: TextIO | None = None, err: TextIO | None = None
) -> bool:
    """Remove what the manifest lists; False when nothing was installed."""
    live = root is None
    tree = _Tree(root or "/")
    manifest = tree.read_manifest()

    def say(stream: TextIO | None, line: str) -> None:
        if stream is not None:
            stream.write(line + "\n")

    if manifest is None:
        say(out, f"nothing to uninstall: no manifest at {tree.show(MANIFEST_PATH)}")
        return False
    if not manifest.files and not manifest.links and not purge:
        say(out, "nothing installed; the config and the history stay "
                 "(uninstall --purge removes them)")
        return False
    for link, target in sorted(manifest.links.items()):
        where = tree.at(link)
        if where.is_symlink() and os.readlink(where) == target:
            _remove(where)
            say(out, f"removed {where}")
    for path, digest in sorted(manifest.files.items()):
        where = tree.at(path)
        try:
            data = where.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            say(err, f"suspendguard: warning: {where}: left in place ({exc.strerror})")
            continue
        if _sha256(data) != digest:
            say(err, f"suspendguard: warning: {where}: changed since install, left in place")
            continue
        _remove(where)
        say(out, f"removed {where}")
    if purge:
        config = tree.at(manifest.config_path)
        if config.is_file() or config.is_symlink():
            _remove(config)
            say(out, f"removed {config}")
        _purge_state(tree, manifest, out)
    keep = set() if purge else {
        manifest.state_dir, os.path.dirname(manifest.config_path), os.path.dirname(MANIFEST_PATH),
    }
    if purge:
        _remove(tree.at(MANIFEST_PATH))
    kept: list[str] = []
    for folder in sorted(manifest.dirs, key=lambda d: d.count("/"), reverse=True):
        if folder in keep or any(k.startswith(folder + "/") for k in keep):
            kept.append(folder)
            continue
        with contextlib.suppress(OSError):
            tree.at(folder).rmdir()  # only when empty
    if not purge:
        # The config and the history stay, and so does their record: a later
        # `uninstall --purge` still knows which folders install made for them.
        tree.save_manifest(Manifest(
            dirs=kept,
            config_path=manifest.config_path,
            config_created=manifest.config_created,
            state_dir=manifest.state_dir,
            state_dir_created=manifest.state_dir_created,
            python=manifest.python,
            installed_at=manifest.installed_at,
        ))
    if live:
        _systemctl("daemon-reload")
    return True


def _purge_state(tree: _Tree, manifest: Manifest, out: TextIO | None) -> None:
    from suspendguard.store.history import DB_NAME

    state = tree.at(manifest.state_dir)
    if not state.is_dir():
        return
    if manifest.state_dir_created or manifest.state_dir == DEFAULT_STATE_DIR:
        for entry in state.iterdir():
            if entry.name == os.path.basename(MANIFEST_PATH) and manifest.state_dir == os.path.dirname(
                MANIFEST_PATH
            ):
                continue  # removed last, after everything it lists
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                _remove(entry)
        say_what = f"emptied {state}"
        if manifest.state_dir_created:
            manifest.dirs.append(manifest.state_dir)
            say_what = f"removed {state}"
        if out is not None:
            out.write(say_what + "\n")
        return
    # a folder the operator made and pointed [state] dir at: only our files
    for entry in state.glob(DB_NAME + "*"):
        _remove(entry)
        if out is not None:
            out.write(f"removed {entry}\n")


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            return
        raise InstallError(f"{path}: cannot remove ({exc.strerror})") from None


# --- the CLI -----------------------------------------------------------------


def command_install(args: argparse.Namespace, ctx: Context) -> int:
    root = getattr(args, "root", None)
    if root is None:
        check_live_system()
    tree = _Tree(root) if root is not None else None
    config, config_path, explicit = _config_for(ctx, tree)
    install(
        root, config, config_path, explicit,
        enable=not getattr(args, "no_enable", False), out=ctx.out,
    )
    return 0


def command_uninstall(args: argparse.Namespace, ctx: Context) -> int:
    root = getattr(args, "root", None)
    if root is None:
        check_live_system()
    uninstall(root, purge=getattr(args, "purge", False), out=ctx.out, err=ctx.err)
    return 0


# --- what status shows -------------------------------------------------------------


def _unit_setting(text: str, key: str) -> str | None:
    found = re.findall(rf"^{re.escape(key)}=(.*)$", text, re.MULTILINE)
    return found[-1].strip() if found else None


def installation_state(root: str = "/") -> dict[str, Any]:
    """What is installed under ``root``, read without changing anything.

    Paths are as the target system sees them (without ``root``)::

        {"root": "/", "installed": bool,   # unit + hook executable + all 4 enabled
         "unit": {"path": str | None, "present": bool,
                  "exec_start": str | None, "timeout_start_s": int | str | None},
         "instances": {"suspend": {"unit": "suspendguard@suspend.service",
                                   "enabled": bool, "link": str | None,
                                   "required_by": ["nvidia-suspend.service",
                                                   "systemd-suspend.service"]}, ...},
         "enabled": ["suspend", ...],      # in SLEEP_ACTIONS order
         "hook": {"path": str, "present": bool, "executable": bool},
         "config": {"path": str, "present": bool},
         "manifest": {"path": str, "present": bool, "python": str,
                      "installed_at": str, "state_dir": str}}  # the last three if present

    A unit shipped by a package in /usr/lib/systemd/system counts too.
    """
    tree = _Tree(root)
    unit_path = next((d + "/" + UNIT_TEMPLATE for d in UNIT_DIRS
                      if tree.at(d + "/" + UNIT_TEMPLATE).is_file()), None)
    unit: dict[str, Any] = {"path": unit_path, "present": unit_path is not None,
                            "exec_start": None, "timeout_start_s": None}
    if unit_path is not None:
        try:
            text = tree.at(unit_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        unit["exec_start"] = _unit_setting(text, "ExecStart")
        timeout = _unit_setting(text, "TimeoutStartSec")
        unit["timeout_start_s"] = int(timeout) if timeout and timeout.isdigit() else timeout
    instances: dict[str, dict[str, Any]] = {}
    for action in SLEEP_ACTIONS:
        found: dict[str, str] = {}
        for wanting in required_by(action):
            links = [f"{d}/{wanting}.requires/{instance(action)}" for d in UNIT_DIRS]
            link = next((p for p in links if tree.at(p).is_symlink() or tree.at(p).exists()), None)
            if link is not None:
                found[wanting] = link
        step = required_by(action)[0]
        instances[action] = {"unit": instance(action), "enabled": step in found,
                             "link": found.get(step), "required_by": sorted(found)}
    hook_path = next((d + "/suspendguard" for d in HOOK_DIRS
                      if tree.at(d + "/suspendguard").is_file()), None)
    hook = {
        "path": hook_path or HOOK_PATH,
        "present": hook_path is not None,
        "executable": hook_path is not None and os.access(tree.at(hook_path), os.X_OK),
    }
    config = {"path": DEFAULT_PATH, "present": tree.at(DEFAULT_PATH).is_file()}
    manifest_info: dict[str, Any] = {"path": MANIFEST_PATH, "present": False}
    try:
        manifest = tree.read_manifest()
    except InstallError as exc:
        manifest_info["error"] = str(exc)
        manifest = None
    if manifest is not None:
        manifest_info.update(present=True, python=manifest.python,
                             installed_at=manifest.installed_at, state_dir=manifest.state_dir)
        config["path"] = manifest.config_path
        config["present"] = tree.at(manifest.config_path).is_file()
    enabled = [a for a in SLEEP_ACTIONS if instances[a]["enabled"]]
    return {
        "root": root,
        "installed": bool(unit["present"] and hook["executable"]
                          and len(enabled) == len(SLEEP_ACTIONS)),
        "unit": unit,
        "instances": instances,
        "enabled": enabled,
        "hook": hook,
        "config": config,
        "manifest": manifest_info,
    }
