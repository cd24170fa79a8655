"""The target system's paths under a root (``/``, or ``--root DIR``), made and written
with their modes, each recorded in the manifest so that uninstall removes only what
install made."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from suspendguard.errors import InstallError
from suspendguard.install.manifest import MANIFEST_PATH, Manifest, read_manifest, sha256


class Tree:
    """Paths of the target system, under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def show(self, path: str) -> str:
        return str(self.at(path))

    def read_manifest(self) -> Manifest | None:
        return read_manifest(self.at(MANIFEST_PATH))

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
                # mkdir's mode is cut by the umask (077 would hide the config, the man
                # pages and the completion from every other user): the folder gets 0755,
                # through a descriptor of it (a link put in its place is not followed).
                fd = os.open(self.at(folder), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                             | os.O_CLOEXEC)
                try:
                    os.fchmod(fd, 0o755)
                finally:
                    os.close(fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise InstallError(f"{self.at(folder)}: cannot create ({exc.strerror})") from None
            if folder not in manifest.dirs:
                manifest.dirs.append(folder)

    def private_dir(self, path: str, manifest: Manifest) -> None:
        """``path`` made, or kept, root's alone (0700), as every guard run keeps the state
        folder. A link there is not followed: the run refuses it, and says why."""
        self.makedirs(path, manifest)
        folder = self.at(path)
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
                os.fchmod(fd, 0o700)
        except OSError as exc:
            raise InstallError(f"{folder}: cannot make it root's alone ({exc.strerror})") from None
        finally:
            os.close(fd)

    def write(self, path: str, text: str, mode: int, manifest: Manifest | None) -> None:
        """``text`` at ``path`` whole or not at all, with ``mode`` from its first byte: a new
        file beside it (one a killed install left, a link included, is removed, never
        followed), on disk before it is renamed over ``path``."""
        target = self.at(path)
        tmp = target.with_name(f".{target.name}.suspendguard-tmp")
        try:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(tmp, flags, mode), "w", encoding="utf-8") as file:
                os.fchmod(file.fileno(), mode)  # the bits the umask took away
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise InstallError(f"{target}: cannot write ({exc.strerror})") from None
        if manifest is not None:
            manifest.files[path] = sha256(text.encode())

    def remove_files(self, files: Mapping[str, str], warn: Callable[[str], None],
                     ) -> tuple[set[str], list[str]]:
        """Remove each of ``files`` (path: its digest at install) nobody changed since; warn
        of the others. (The paths now gone, a line for each file removed.)"""
        gone: set[str] = set()
        said: list[str] = []
        for path, digest in sorted(files.items()):
            where = self.at(path)
            try:
                data = where.read_bytes()
            except FileNotFoundError:
                gone.add(path)
                continue
            except OSError as exc:
                warn(f"suspendguard: warning: {where}: left in place ({exc.strerror})")
                continue
            if sha256(data) != digest:
                warn(f"suspendguard: warning: {where}: changed since install, left in place")
                continue
            remove(where)
            gone.add(path)
            said.append(f"removed {where}")
        return gone, said

    def remove_links_to(self, unit_dir: str, units: Collection[str]) -> list[str]:
        """Remove every enable link in ``unit_dir``'s .requires/ and .wants/ folders that
        leads to one of ``units``; a line for each."""
        said: list[str] = []
        for link in self.links_to(unit_dir, units):
            remove(link)
            said.append(f"removed {link}")
        return said

    def links_to(self, unit_dir: str, units: Collection[str]) -> list[Path]:
        """The enable links in ``unit_dir``'s .requires/ and .wants/ folders that lead to one
        of ``units``."""
        found: list[Path] = []
        for folder in sorted(self.at(unit_dir).glob("*")) if units else ():
            if not folder.name.endswith((".requires", ".wants")) or not folder.is_dir():
                continue
            found += [link for link in sorted(folder.iterdir())
                      if link.is_symlink() and os.readlink(link) in units]
        return found

    def refuse_unlisted(self, units: Collection[str]) -> None:
        """With no manifest (the history's folder removed), those of the guard's ``units``
        still here are no "nothing to uninstall": each sleep that requires them fails once
        they name an interpreter or a guard that is gone."""
        left = sorted(u for u in units if self.at(u).exists())
        if not left:
            return
        links = self.links_to(os.path.dirname(left[0]), left)
        raise InstallError(
            f"no manifest at {self.show(MANIFEST_PATH)}, yet the guard's units are here "
            f"({', '.join(self.show(u) for u in left)}; {len(links)} link(s) to them): install "
            "again, which records what it writes, then uninstall; or remove them and their "
            "links by hand, then systemctl daemon-reload")

    def save_manifest(self, manifest: Manifest) -> None:
        """The manifest, 0600 in a folder kept 0700: root's alone, as the state folder's files."""
        self.private_dir(os.path.dirname(MANIFEST_PATH), manifest)
        self.write(MANIFEST_PATH, manifest.to_json(), 0o600, None)


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            return
        raise InstallError(f"{path}: cannot remove ({exc.strerror})") from None
