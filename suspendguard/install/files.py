"""The writes of install and uninstall: idempotent, with their modes, never over an operator's file.

The layout is the same for the running system and for ``--root DIR`` (then
every path lies under DIR), so a staged tree is exactly what a live install
would leave:

- ``/etc/systemd/system/suspendguard@.service``: the veto unit. /etc, not
  /usr/lib/systemd/system: this is the administrator's local install, and
  /usr/lib belongs to the package manager (systemd reads both).
- ``/etc/systemd/system/systemd-ACTION.service.requires/suspendguard@ACTION.service``
  and the same under ``nvidia-ACTION.service.requires``: the enable links,
  what ``systemctl enable`` makes from ``RequiredBy=``.
- ``/etc/systemd/system/suspendguard-watch.service`` and its
  ``multi-user.target.wants`` link: the optional watch (a logind sleep block
  while the guard would veto), only with ``--watch``.
- ``/usr/lib/systemd/system-sleep/suspendguard``: the hook (systemd-sleep
  reads no other folder).
- ``/usr/local/share/man/man8/suspendguard.8``, ``man5/suspendguard.toml.5``,
  ``/usr/local/share/bash-completion/completions/suspendguard`` and
  ``/usr/local/share/zsh/site-functions/_suspendguard``: the man pages and
  the shell completion (install/docs.py says why /usr/local).
- ``/usr/local/lib/systemd/catalog/suspendguard.catalog``: the journal
  catalog (``journalctl -x``); journalctl reads /usr/local/lib and /usr/lib
  for catalogs, never /etc; live, ``journalctl --update-catalog`` follows.
- ``/etc/suspendguard/config.toml``: the commented defaults, only when no
  file is there; an operator's file is never overwritten.
- the ``[state] dir`` (default ``/var/lib/suspendguard``): the history.
- ``/var/lib/suspendguard/installed.json``: the manifest. Uninstall removes
  what it lists and nothing else; a file changed since install is left in
  place with a warning. The config and the history stay unless ``--purge``.

Live, install runs ``systemctl daemon-reload`` and ``systemctl enable`` for
the four instances (unless ``--no-enable``), and with ``--watch`` enables
and (re)starts the watch; with ``--root`` it makes the enable links itself
and never calls systemctl. Uninstall stops the watch before its unit goes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from suspendguard.config import DEFAULT_STATE_DIR, Config, commented_default
from suspendguard.errors import InstallError, UsageError
from suspendguard.install.docs import DOCS, DOCS_ROOT, docs_dir
from suspendguard.install.manifest import MANIFEST_PATH, Manifest
from suspendguard.install.templates import (
    HOOK_PATH,
    HOOK_TEMPLATE,
    RESUME_PATH,
    RESUME_UNIT,
    UNIT_DIR,
    UNIT_PATH,
    UNIT_TEMPLATE,
    WATCH_LINK,
    WATCH_PATH,
    WATCH_UNIT,
    enable_links,
    instance,
    render_hook,
    render_resume,
    render_unit,
    render_watch,
    resume_links,
    template_dir,
    timeout_start_s,
)
from suspendguard.install.tree import Tree, remove
from suspendguard.model import SLEEP_ACTIONS
from suspendguard.record import iso
from suspendguard.store.history import DB_NAME
from suspendguard.system import runner

SYSTEMD_RUN_DIR = "/run/systemd/system"
SYSTEMCTL_TIMEOUT_S = 60.0
CATALOG_PATH = "/usr/local/lib/systemd/catalog/suspendguard.catalog"


class NotRootError(InstallError):
    """Installing into the running system needs root."""


class SystemdNotRunningError(InstallError):
    """Installing into the running system needs a running systemd."""


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


def check_root(root: str | None) -> None:
    """Refuse a --root that names no folder: "" would be the running system, unchecked."""
    if root is not None and not root.strip():
        raise UsageError("--root needs a folder to stage into (an empty one would mean the "
                         "running system: leave --root out for that)")
    if root is not None and os.path.lexists(root) and not os.path.isdir(root):
        raise UsageError(f"--root {root}: not a folder")
    if root is not None and os.path.realpath(root) == "/":
        # Staged there, the live units would skip the checks a live install makes (root,
        # systemd, an interpreter that can run the guard): every suspend could fail.
        raise UsageError(f"--root {root} is the running system: leave --root out for that")


def install(
    root: str | None,
    config: Config,
    config_path: str,
    config_explicit: bool,
    enable: bool,
    python: str | None = None,
    out: TextIO | None = None,
    watch: bool = False,
) -> Manifest:
    """Put everything in place under ``root`` (None: the running system); ``watch``: the
    watch unit too (enabled and started with the others)."""
    check_root(root)
    if config_explicit and not os.path.isabs(config_path):
        raise UsageError(f"--config {config_path}: the unit needs an absolute path")
    live = root is None
    tree = Tree(root or "/")
    python = os.path.abspath(python or sys.executable)
    manifest = tree.read_manifest() or Manifest()
    # A watch installed before is rendered again too (the interpreter, the timeouts), but
    # only --watch enables and starts it: an operator's disable stays.
    had_watch = not watch and WATCH_PATH in manifest.files
    files = _rendered(config, python, config_path if config_explicit else None,
                      watch or had_watch)
    manifest.python = python
    manifest.installed_at = iso(time.time())

    def say(line: str) -> None:
        if out is not None:
            out.write(line + "\n")

    for path, text, mode, what in files:
        tree.makedirs(os.path.dirname(path), manifest)
        tree.write(path, text, mode, manifest)
        say(what.format(tree.show(path)))
    say(_write_docs(tree, manifest))
    say(_write_catalog(tree, manifest, live))
    say(_write_config(tree, config_path, manifest))
    _claim_state_dir(tree, os.path.normpath(config.state.dir), manifest)
    tree.save_manifest(manifest)

    if live:
        _systemctl("daemon-reload")
        if had_watch:  # a running watch takes the new unit and code; a stopped one stays so
            runner.run(("systemctl", "try-restart", WATCH_UNIT), SYSTEMCTL_TIMEOUT_S)
    if enable:
        _enable(tree, live, manifest, watch)
        tree.save_manifest(manifest)
        say("enabled: " + " ".join([*(instance(a) for a in SLEEP_ACTIONS), RESUME_UNIT,
                                    *([WATCH_UNIT] if watch else [])]))
        if watch and live:
            _systemctl("restart", WATCH_UNIT)  # the new unit and code, if one ran already
            say(f"started: {WATCH_UNIT}")
    say(f"manifest: {tree.show(MANIFEST_PATH)}")
    return manifest


def _rendered(config: Config, python: str, config_path: str | None,
              watch: bool = False) -> tuple[tuple[str, str, int, str], ...]:
    """(path, text, mode, the line that says it) of the veto unit, the resume unit and the hook,
    and with ``watch`` the watch unit.

    ``config_path`` only when the operator named one: the units then pass it on.
    """
    templates = template_dir()

    def template(name: str) -> str:
        return (templates / name).read_text(encoding="utf-8")

    timeout = timeout_start_s(config)
    return (
        (UNIT_PATH, render_unit(template(UNIT_TEMPLATE), python, timeout, config.state.dir,
                                config_path), 0o644, f"unit: {{}} (TimeoutStartSec={timeout})"),
        (RESUME_PATH, render_resume(template(RESUME_UNIT), python, config.state.dir, config_path),
         0o644, "resume unit: {}"),
        (HOOK_PATH, render_hook(template(HOOK_TEMPLATE), python, config_path), 0o755, "hook: {}"),
        *(((WATCH_PATH, render_watch(template(WATCH_UNIT), python, timeout, config.state.dir,
                                     config_path), 0o644, "watch unit: {}"),) if watch else ()),
    )


def _write_docs(tree: Tree, manifest: Manifest) -> str:
    """The man pages and the completion written; what install says of them."""
    shipped = docs_dir()
    try:
        for source, path in DOCS.items():
            tree.makedirs(os.path.dirname(path), manifest)
            tree.write(path, (shipped / source).read_text(encoding="utf-8"), 0o644, manifest)
    except InstallError as exc:
        # Documentation only: a read-only /usr (an image-based host) must not
        # leave the host unguarded. What was written is in the manifest.
        return f"man pages and completion: not installed ({exc})"
    return f"man pages and completion: {tree.show(DOCS_ROOT)}"


def _write_catalog(tree: Tree, manifest: Manifest, live: bool) -> str:
    """The journal catalog written (as the docs: never a reason to fail); live, journalctl's
    database rebuilt."""
    try:
        text = (template_dir() / "catalog" / os.path.basename(CATALOG_PATH)).read_text("utf-8")
        tree.makedirs(os.path.dirname(CATALOG_PATH), manifest)
        tree.write(CATALOG_PATH, text, 0o644, manifest)
    except (InstallError, OSError) as exc:
        return f"journal catalog: not installed ({exc})"
    if live:
        runner.run(("journalctl", "--update-catalog"), SYSTEMCTL_TIMEOUT_S)
    return f"journal catalog: {tree.show(CATALOG_PATH)}"


def _write_config(tree: Tree, config_path: str, manifest: Manifest) -> str:
    """The commented defaults, only where no file is; what install says of the config."""
    manifest.config_path = config_path
    if tree.at(config_path).exists():
        return f"config: {tree.show(config_path)} (kept as it is)"
    tree.makedirs(os.path.dirname(config_path), manifest)
    tree.write(config_path, commented_default(), 0o644, None)
    manifest.config_created = True
    return f"config: {tree.show(config_path)} (commented defaults)"


def _claim_state_dir(tree: Tree, state_dir: str, manifest: Manifest) -> None:
    """Record the state folder, and whether install made it (then purge may remove it)."""
    made = not tree.at(state_dir).exists()
    # The history holds every user's command lines: root's alone, as each run keeps it.
    tree.private_dir(state_dir, manifest)
    if made:
        manifest.state_dir_created = True
    elif manifest.state_dir != state_dir:
        manifest.state_dir_created = False
    manifest.state_dir = state_dir
    manifest.dirs = [d for d in manifest.dirs if d != state_dir]  # purge alone removes it


def _enable(tree: Tree, live: bool, manifest: Manifest, watch: bool = False) -> None:
    """The enable links: made by systemctl when live (and recorded), else made here."""
    if live:
        _systemctl("enable", *(instance(a) for a in SLEEP_ACTIONS), RESUME_UNIT,
                   *([WATCH_UNIT] if watch else []))
    links = [(link, UNIT_PATH) for action in SLEEP_ACTIONS for link in enable_links(action)]
    links += [(link, RESUME_PATH) for link in resume_links()]
    if watch:
        links.append((WATCH_LINK, WATCH_PATH))
    for link, target in links:
        if live:
            # Recorded, so uninstall removes them: a link left to a removed unit
            # would fail nvidia-suspend.service, and the suspend with it.
            if tree.at(link).is_symlink():
                manifest.links[link] = os.readlink(tree.at(link))
                continue
            raise InstallError(f"systemctl enable made no link {link}")
        tree.makedirs(os.path.dirname(link), manifest)
        _symlink(tree.at(link), target)
        manifest.links[link] = target


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
    check_root(root)
    live = root is None
    tree = Tree(root or "/")
    manifest = tree.read_manifest()

    def say(stream: TextIO | None, line: str) -> None:
        if stream is not None:
            stream.write(line + "\n")

    if manifest is None:
        tree.refuse_unlisted((UNIT_PATH, RESUME_PATH, WATCH_PATH))
        say(out, f"nothing to uninstall: no manifest at {tree.show(MANIFEST_PATH)}")
        return False
    if not manifest.files and not manifest.links and not purge:
        say(out, "nothing installed; the config and the history stay "
                 "(uninstall --purge removes them)")
        return False
    if live and WATCH_PATH in manifest.files:
        # A running service outlives its unit file: stopped first, whatever it answers.
        runner.run(("systemctl", "stop", WATCH_UNIT), SYSTEMCTL_TIMEOUT_S)
    for link, target in sorted(manifest.links.items()):
        where = tree.at(link)
        if where.is_symlink() and os.readlink(where) == target:
            remove(where)
            say(out, f"removed {where}")
    removed, lines = tree.remove_files(manifest.files, lambda line: say(err, line))
    # A unit enabled by hand (after install --no-enable) has links the manifest does not
    # list: a Requires= left on a unit that is gone fails the whole sleep.
    units = {p for p in manifest.files if p.startswith(UNIT_DIR + "/")}
    lines += tree.remove_links_to(UNIT_DIR, units & set(removed))
    # A unit left in place (changed since install) keeps the links made by hand: it is
    # the operator's now, but each sleep they name still requires it.
    for left in tree.links_to(UNIT_DIR, units - set(removed)):
        wanting, kind = left.parent.name.rsplit(".", 1)
        say(err, f"suspendguard: warning: {left}: {wanting} still "
                 + (f"requires {os.readlink(left)} (enabled by hand, left with the unit): remove "
                    "the link, or that sleep fails once the guard is gone" if kind == "requires"
                    else f"wants {os.readlink(left)} (enabled by hand, left with the unit): "
                    "remove the link, or it goes on starting the unit"))
    for line in lines:
        say(out, line)
    if purge:
        config = tree.at(manifest.config_path)
        if config.is_file() or config.is_symlink():
            remove(config)
            say(out, f"removed {config}")
        _purge_state(tree, manifest, out)
    keep = set() if purge else {
        manifest.state_dir, os.path.dirname(manifest.config_path), os.path.dirname(MANIFEST_PATH),
    }
    if purge:
        remove(tree.at(MANIFEST_PATH))
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
        runner.run(("journalctl", "--update-catalog"), SYSTEMCTL_TIMEOUT_S)  # the catalog gone
    return True


def _purge_state(tree: Tree, manifest: Manifest, out: TextIO | None) -> None:
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
                remove(entry)
        say_what = f"emptied {state}"
        if manifest.state_dir_created:
            manifest.dirs.append(manifest.state_dir)
            say_what = f"removed {state}"
        if out is not None:
            out.write(say_what + "\n")
        return
    # a folder the operator made and pointed [state] dir at: only our files
    for entry in state.glob(DB_NAME + "*"):
        remove(entry)
        if out is not None:
            out.write(f"removed {entry}\n")
