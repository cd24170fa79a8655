"""The guard's own units as systemd would load them: installed, enabled, not masked, given
the time they need, able to write the state folder, run by an interpreter that runs the guard."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from suspendguard.config import DEFAULT_STATE_DIR, Config
from suspendguard.doctor.finding import Finding
from suspendguard.doctor.host import Host, timespan_s
from suspendguard.health.resume import plan as resume_plan
from suspendguard.install import templates
from suspendguard.install.installed import masked_actions
from suspendguard.install.interpreter import Interpreter, probe, program
from suspendguard.install.tree import Tree
from suspendguard.install.unit_files import mask_of
from suspendguard.model import SLEEP_ACTIONS, Unavailable
from suspendguard.system.deadline import RESTORE_AFTER_RESUME_S


def health_budget_s(config: Config) -> int:
    """What the resume unit needs at most: the check after resume and its repairs, as the
    check itself plans them (health/resume.py), then the restarts' own budget."""
    checking = resume_plan(config)[1] if config.resume.health_check else 0.0
    return math.ceil(checking + RESTORE_AFTER_RESUME_S)


def _timeout_start(host: Host, path: str, names: Sequence[str]
                   ) -> tuple[float | None, Finding | None]:
    """The unit's TimeoutStartSec in seconds (None: not set, or no limit), or a note why not."""
    return _span(host, path, ("TimeoutSec", "TimeoutStartSec"), names)


def _span(host: Host, path: str, key: tuple[str, ...], names: Sequence[str]
          ) -> tuple[float | None, Finding | None]:
    """A time span setting in seconds: None where nothing sets it, or where it is infinity
    or 0, which systemd reads as no limit for a timeout and as off for the watchdog."""
    value = host.unit_setting(path, key, names)
    if not value:
        return None, None
    seconds = timespan_s(value)
    if isinstance(seconds, Unavailable):
        return None, Finding(
            "timeout-unreadable", "note",
            f"cannot read {key[-1]}={value} of {names[-1]}: {seconds.reason}",
            "install systemd's systemd-analyze, or check the timeout by hand")
    return seconds or None, None


def _unit_path(host: Host, name: str) -> str | None:
    """Where systemd loads ``name`` from: install's /etc, else a package's /usr/lib or /lib."""
    return next((f"{d}/{name}" for d in templates.UNIT_DIRS
                 if host.read(f"{d}/{name}") is not None), None)


def _enabled(host: Host, action: str) -> bool:
    """The instance's enable link, made by install under /etc or shipped by a package."""
    link = f"{templates.required_by(action)[0]}.requires/{templates.instance(action)}"
    return any(host.exists(f"{d}/{link}") for d in templates.UNIT_DIRS)


def _timeout_fix(unit_path: str, need: int) -> str:
    if unit_path == templates.UNIT_PATH:
        return ("suspendguard install (it writes the timeout from the configuration), and "
                f"no drop-in of {templates.UNIT_TEMPLATE} that sets a shorter one")
    # A package's unit: an install beside it would outlive the package (its /etc unit and
    # links then require a guard that is gone) and overwrite the package's hook.
    return (f"systemctl edit {templates.UNIT_TEMPLATE}: [Service] TimeoutStartSec={need} "
            "(a drop-in: the package's unit stays as shipped)")


def _links(host: Host) -> list[str]:
    """The links that make a sleep step (or NVIDIA's) require an instance of the guard."""
    return sorted(link for action in SLEEP_ACTIONS for wanting in templates.required_by(action)
                  for d in templates.UNIT_DIRS
                  if host.exists(link := f"{d}/{wanting}.requires/{templates.instance(action)}"))


def unit_cannot_load(host: Host, unit_path: str | None) -> list[Finding]:
    """A sleep step that requires an instance systemd cannot load fails: every one of them,
    while the unit (at ``unit_path``, None: no file) is masked, or gone with its enable links
    left."""
    if unit_path is None:
        links = _links(host)
        return [Finding(
            "guard-unit-gone", "error",
            f"the guard's unit {templates.UNIT_TEMPLATE} is gone, but {len(links)} enable "
            "links still require its instances: systemd fails every sleep they name",
            f"suspendguard install, or reinstall the package; to stop guarding, rm {' '.join(links)}"
        )] if links else [Finding(
            "guard-not-installed", "error",
            f"the guard's unit {templates.UNIT_PATH} is not installed: no suspend is guarded",
            "suspendguard install")]
    by_mask: dict[str, list[str]] = {}
    for action, path in masked_actions(Tree(host.root)):
        if _enabled(host, action):
            by_mask.setdefault(path, []).append(action)
    return [Finding(
        "guard-unit-masked", "error",
        f"{path} masks the guard's unit for {', '.join(actions)}, which the sleep steps "
        f"require: systemd fails every {', every '.join(actions)}",
        f"systemctl unmask {os.path.basename(path)}; to stop guarding, remove the guard "
        "(suspendguard uninstall, or the package)") for path, actions in by_mask.items()]


def guard_units(host: Host, config: Config) -> list[Finding]:
    unit_path = _unit_path(host, templates.UNIT_TEMPLATE)
    out = unit_cannot_load(host, unit_path)
    if unit_path is None:
        return out
    packaged = unit_path != templates.UNIT_PATH  # install refuses beside a package's unit
    for action in SLEEP_ACTIONS:
        if not _enabled(host, action):
            out.append(Finding(
                "guard-unit-missing", "error",
                f"{templates.instance(action)} is not enabled: {action} is not guarded",
                f"systemctl enable {templates.instance(action)}" if packaged else
                "suspendguard install (it enables one instance per sleep kind)"))
    need = templates.timeout_start_s(config)
    for action in SLEEP_ACTIONS:
        have, unreadable = _timeout_start(host, unit_path,
                                          (templates.instance(action), templates.UNIT_TEMPLATE))
        if unreadable is not None and unreadable not in out:  # one note for the three
            out.append(unreadable)
        if have is not None and have < need:
            out.append(Finding(
                "guard-timeout-short", "error",
                f"{templates.instance(action)} has TimeoutStartSec={have:g} s, less than "
                f"[drain] deadline_s plus {templates.TIMEOUT_MARGIN_S} s ({need} s): systemd "
                "would kill the guard before it answers, and the suspend fails",
                _timeout_fix(unit_path, need)))
            break
    resume = _unit_path(host, templates.RESUME_UNIT)
    budget = health_budget_s(config)
    have, unreadable = (None, None) if resume is None else _timeout_start(
        host, resume, (templates.RESUME_UNIT,))
    out += [unreadable] if unreadable is not None else []
    masked = mask_of(host.root, templates.RESUME_UNIT)
    if resume is None or masked:
        out.append(Finding("resume-unit-missing", "warning",
                           f"{templates.RESUME_UNIT} is "
                           + (f"masked ({masked})" if masked else "not installed")
                           + ": nothing checks the devices or starts the drained jobs again "
                           "after resume", f"systemctl unmask {templates.RESUME_UNIT}" if masked
                           else "reinstall the package" if packaged else "suspendguard install"))
    elif have is not None and have < budget:
        out.append(Finding(
            "resume-timeout-short", "warning",
            f"{templates.RESUME_UNIT} has TimeoutStartSec={have:g} s, less than the health "
            f"check and the restarts may take ({budget} s: [resume] ready_timeout_s and "
            f"health_timeout_s, then {RESTORE_AFTER_RESUME_S:g} s of starts): systemd could "
            "kill it before the jobs are started again, with none of them held",
            f"systemctl edit {templates.RESUME_UNIT}: [Service] TimeoutStartSec={budget + 60}"))
    return out


def watch_timeouts(host: Host, config: Config) -> list[Finding]:
    """The watch unit's start and watchdog, each the longest a look may take: a package's
    unit is built for the default [drain] deadline_s, and install writes it only when run."""
    path = _unit_path(host, templates.WATCH_UNIT)
    if path is None:
        return []
    need = templates.timeout_start_s(config)
    out = []
    for keys in (("TimeoutSec", "TimeoutStartSec"), ("WatchdogSec",)):
        key = keys[-1]
        have, unreadable = _span(host, path, keys, (templates.WATCH_UNIT,))
        out += [unreadable] if unreadable is not None else []
        if have is not None and have < need:
            out.append(Finding(
                "watch-timeout-short", "warning",
                f"{templates.WATCH_UNIT} has {key}={have:g} s, less than [drain] deadline_s "
                f"plus {templates.TIMEOUT_MARGIN_S} s ({need} s), the longest a look may take: "
                "systemd could kill the watch in a slow look, and its sleep block with it",
                "suspendguard install --watch (it writes both from the configuration)"
                if path == templates.WATCH_PATH else
                f"systemctl edit {templates.WATCH_UNIT}: [Service] {key}={need}"))
    return out


def state_dir_in_units(host: Host, config: Config) -> list[Finding]:
    """The units' sandbox (ProtectSystem=strict) leaves writable only their StateDirectory=
    and ReadWritePaths=: install writes a [state] dir of another place into its units, but
    a package's are built with the default. There the veto unit records nothing and
    refuses every suspend of a supervised job (no stop can be written ahead)."""
    state = os.path.normpath(config.state.dir)
    if state == DEFAULT_STATE_DIR:
        return []
    out = []
    for unit, names in ((templates.UNIT_TEMPLATE, [(templates.instance(a), templates.UNIT_TEMPLATE)
                                                   for a in SLEEP_ACTIONS]),
                        (templates.RESUME_UNIT, [(templates.RESUME_UNIT,)]),
                        (templates.WATCH_UNIT, [(templates.WATCH_UNIT,)])):
        path = _unit_path(host, unit)
        if path is None or not any(_writes_not(host, path, n, state) for n in names):
            continue
        out.append(Finding(
            "state-dir-read-only", "error",
            f"{unit} cannot write [state] dir {state} (ProtectSystem=strict, and it is not "
            "among its ReadWritePaths=): its runs record nothing there"
            + (", and every suspend of a supervised job is refused"
               if unit == templates.UNIT_TEMPLATE else ""),
            "suspendguard install (it writes [state] dir into its units)"
            if path == f"{templates.UNIT_DIR}/{unit}" else
            f"systemctl edit {unit}: [Service] ReadWritePaths=-{state}"))
    return out


def _writes_not(host: Host, path: str, names: Sequence[str], state: str) -> bool:
    """Whether the unit at ``path`` (with the drop-ins of ``names``) cannot write ``state``."""
    if host.unit_setting(path, "ProtectSystem", names) != "strict":
        return False
    writable = [os.path.normpath(p.lstrip("-+")) for p in
                host.unit_list(path, "ReadWritePaths", names)]
    writable += [os.path.join("/var/lib", d) for d in
                 host.unit_list(path, "StateDirectory", names)]
    return not any(state == w or state.startswith(w.rstrip("/") + "/") for w in writable)


def guard_interpreter(host: Host) -> list[Finding]:
    """The installed unit's interpreter, run on this host: others could change it, or the
    guard's code it imports. A staged tree's (``--root``) is the target's: not run here."""
    unit_path = _unit_path(host, templates.UNIT_TEMPLATE)
    if unit_path is None or os.path.normpath(host.root) != "/":
        return []
    exec_start = host.unit_setting(unit_path, "ExecStart", (templates.UNIT_TEMPLATE,))
    python = program(exec_start) if exec_start else None
    if python is None:
        return []
    found = probe(python)
    return unusable_interpreter(found, unit_path != templates.UNIT_PATH) or untrusted_interpreter(
        found)


def unusable_interpreter(found: Interpreter, packaged: bool) -> list[Finding]:
    if found.usable is not False:
        return []
    return [Finding(
        "guard-interpreter-unusable", "error",
        f"the veto unit's interpreter {found.path} {found.reason}: every suspend it guards "
        "fails", "reinstall the package" if packaged else
        "suspendguard install --python PATH (an interpreter that imports the guard); to stop "
        "guarding, suspendguard uninstall")]


def untrusted_interpreter(found: Interpreter) -> list[Finding]:
    if not found.untrusted:
        return []
    return [Finding(
        "guard-interpreter-untrusted", "error", found.distrust(),
        "install the guard into an interpreter only root can change (root's pip, a system "
        f"package), then suspendguard install --python PATH; or make {found.path} and the "
        "guard's code root's, not writable by others")]
