"""The install manifest: what install put in place, so uninstall removes that and nothing else.

It lives in the default state folder whatever ``[state] dir`` says, so
uninstall finds it without reading a configuration that may be gone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from suspendguard.config import DEFAULT_PATH, DEFAULT_STATE_DIR
from suspendguard.errors import InstallError

MANIFEST_PATH = f"{DEFAULT_STATE_DIR}/installed.json"
MANIFEST_VERSION = 1


@dataclass(slots=True)
class Manifest:
    """What install put in place; paths as the target system sees them.

    Mutable: install fills it in step by step and saves it after each step
    that a later uninstall must know about.
    """

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


def read_manifest(where: Path) -> Manifest | None:
    """The manifest at ``where``; None when there is none (nothing was installed)."""
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstallError(f"{where}: cannot read the install manifest ({exc.strerror})") from None
    return Manifest.from_json(text, str(where))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
