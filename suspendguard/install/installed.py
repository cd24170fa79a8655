"""What is installed under a root, read without changing anything (status shows it).

Paths are as the target system sees them (without the root). A file that
is not there is a fact (None, or ``present`` False); a file that is there
but cannot be read is :class:`~suspendguard.model.Unavailable`, with why.
A unit shipped by a package in /usr/lib/systemd/system counts too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from suspendguard.config import DEFAULT_PATH
from suspendguard.errors import InstallError
from suspendguard.install.interpreter import Interpreter, probe, program
from suspendguard.install.manifest import MANIFEST_PATH, Manifest
from suspendguard.install.templates import (
    HOOK_DIRS,
    HOOK_PATH,
    UNIT_DIRS,
    UNIT_TEMPLATE,
    instance,
    required_by,
)
from suspendguard.install.tree import Tree
from suspendguard.install.unit_files import first_of, mask_of, unit_setting
from suspendguard.model import SLEEP_ACTIONS, Unavailable


@dataclass(frozen=True, slots=True)
class UnitFile:
    """The veto unit file that systemd would load, and the settings status shows."""

    path: str
    exec_start: str | None  # None: no such line (or the file could not be read)
    timeout_start_s: int | str | None  # seconds, or systemd's own spelling ("5min")
    interpreter: Interpreter | None = None  # None: no program in ExecStart=

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "present": True, "exec_start": self.exec_start,
                "timeout_start_s": self.timeout_start_s,
                "interpreter": self.interpreter.to_json() if self.interpreter else None}


@dataclass(frozen=True, slots=True)
class Instance:
    """One sleep action's veto unit instance and the links that enable it."""

    action: str
    link: str | None  # the sleep step's enable link; None: not enabled
    required_by: tuple[str, ...]  # the units with a .requires link to it, sorted

    @property
    def unit(self) -> str:
        return instance(self.action)

    @property
    def enabled(self) -> bool:
        return self.link is not None

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "enabled": self.enabled, "link": self.link,
                "required_by": list(self.required_by)}


@dataclass(frozen=True, slots=True)
class Hook:
    path: str  # where it is, or where install would put it
    present: bool
    executable: bool

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "present": self.present, "executable": self.executable}


@dataclass(frozen=True, slots=True)
class ConfigFile:
    path: str  # the one install wrote (from the manifest), else the default
    present: bool

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "present": self.present}


@dataclass(frozen=True, slots=True)
class Installation:
    root: str
    unit: UnitFile | None  # None: no unit file in any unit folder
    instances: tuple[Instance, ...]  # one per sleep action, in SLEEP_ACTIONS order
    hook: Hook
    config: ConfigFile
    manifest: Manifest | Unavailable | None  # None: no manifest (install never ran here)
    # The files that mask the veto unit, for an action each (the template's for all).
    masks: tuple[tuple[str, str], ...] = ()

    @property
    def enabled(self) -> tuple[str, ...]:
        return tuple(i.action for i in self.instances if i.enabled)

    def refusal(self) -> str | None:
        """Why every suspend will fail as installed (an enabled unit that systemd cannot
        load, or whose interpreter cannot run the guard), or None."""
        if not self.enabled:
            return None
        # A sleep step requires the instance: one that cannot load fails the step itself.
        # Suspend's, as every refusal here (doctor names a mask of any sleep kind).
        masked = dict(self.masks).get("suspend") if "suspend" in self.enabled else None
        if masked:
            return (f"{masked} masks {instance('suspend')}, which systemd-suspend.service "
                    f"requires: systemd fails the suspend (systemctl unmask "
                    f"{os.path.basename(masked)})")
        if self.unit is None:
            return (f"the veto unit {UNIT_TEMPLATE} is gone, but enable links still make "
                    f"{', '.join(self.enabled)} require it: systemd fails each (suspendguard "
                    "install, or remove the enable links)")
        py = self.unit.interpreter
        if py is None:
            return f"the veto unit {self.unit.path} has no ExecStart= program"
        if py.usable is False:
            return f"the unit's interpreter {py.path} {py.reason}"
        return None

    @property
    def installed(self) -> bool:
        """The unit is there, the hook is executable and every sleep action is enabled."""
        return (self.unit is not None and self.hook.executable
                and len(self.enabled) == len(SLEEP_ACTIONS))

    def to_json(self) -> dict[str, Any]:
        unit = self.unit.to_json() if self.unit is not None else {
            "path": None, "present": False, "exec_start": None, "timeout_start_s": None,
            "interpreter": None}
        manifest: dict[str, Any] = {"path": MANIFEST_PATH, "present": False}
        if isinstance(self.manifest, Unavailable):
            manifest["error"] = self.manifest.reason
        elif self.manifest is not None:
            manifest.update(present=True, python=self.manifest.python,
                            installed_at=self.manifest.installed_at,
                            state_dir=self.manifest.state_dir)
        return {
            "root": self.root,
            "installed": self.installed,
            "refusal": self.refusal(),
            "unit": unit,
            "instances": {i.action: i.to_json() for i in self.instances},
            "enabled": list(self.enabled),
            "hook": self.hook.to_json(),
            "config": self.config.to_json(),
            "manifest": manifest,
        }


def masked_actions(tree: Tree) -> tuple[tuple[str, str], ...]:
    """(action, masking file) of each action whose instance is masked, or whose instance
    comes from the template (no file of its own) and the template is masked."""
    root = str(tree.root)
    template = mask_of(root, UNIT_TEMPLATE)  # read once, for every action without its own file
    found = ((action, mask_of(root, instance(action)) if first_of(root, instance(action))
              else template) for action in SLEEP_ACTIONS)
    return tuple((action, path) for action, path in found if path is not None)


def _unit(tree: Tree, root: str) -> UnitFile | None:
    if mask_of(root, UNIT_TEMPLATE) is not None:
        return None
    path = next((d + "/" + UNIT_TEMPLATE for d in UNIT_DIRS
                 if tree.at(d + "/" + UNIT_TEMPLATE).is_file()), None)
    if path is None:
        return None
    # As systemd runs the sleep's instance: drop-ins included (doctor's fix for a package's
    # unit is one).
    names = (instance("suspend"), UNIT_TEMPLATE)
    timeout = unit_setting(root, path, ("TimeoutSec", "TimeoutStartSec"), names)
    exec_start = unit_setting(root, path, "ExecStart", names) or None
    python = program(exec_start) if exec_start else None
    return UnitFile(path, exec_start, int(timeout) if timeout and timeout.isdigit() else timeout,
                    probe(python, root) if python else None)


def _instance(tree: Tree, action: str) -> Instance:
    found: dict[str, str] = {}
    for wanting in required_by(action):
        links = [f"{d}/{wanting}.requires/{instance(action)}" for d in UNIT_DIRS]
        link = next((p for p in links if tree.at(p).is_symlink() or tree.at(p).exists()), None)
        if link is not None:
            found[wanting] = link
    return Instance(action, found.get(required_by(action)[0]), tuple(sorted(found)))


def _hook(tree: Tree) -> Hook:
    path = next((d + "/suspendguard" for d in HOOK_DIRS
                 if tree.at(d + "/suspendguard").is_file()), None)
    if path is None:
        return Hook(HOOK_PATH, False, False)
    return Hook(path, True, os.access(tree.at(path), os.X_OK))


def read_installation(root: str = "/") -> Installation:
    """What is installed under ``root``, read without changing anything."""
    tree = Tree(root)
    manifest: Manifest | Unavailable | None
    try:
        manifest = tree.read_manifest()
    except InstallError as exc:
        manifest = Unavailable(str(exc))
    config_path = manifest.config_path if isinstance(manifest, Manifest) else DEFAULT_PATH
    return Installation(
        root=root,
        unit=_unit(tree, root),
        instances=tuple(_instance(tree, action) for action in SLEEP_ACTIONS),
        hook=_hook(tree),
        config=ConfigFile(config_path, tree.at(config_path).is_file()),
        manifest=manifest,
        masks=masked_actions(tree),
    )
