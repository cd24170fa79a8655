"""The man pages and the shell completion that install puts in place.

They go under /usr/local/share, the local administrator's tree, for the
same reason the unit goes to /etc rather than /usr/lib: /usr/share belongs
to the package manager (the packages put the same files there). man-db,
bash-completion and zsh all look in /usr/local/share by default
(MANDATORY_MANPATH, $XDG_DATA_DIRS, zsh's site-functions in $fpath).

The files themselves are generated from the parser and the config schema
and committed (man/, completion/; see tools/docgen): install copies
them, it generates nothing.
"""

from __future__ import annotations

from pathlib import Path

from suspendguard.errors import InstallError

DOCS_ROOT = "/usr/local/share"

# Each shipped file (relative to the data folder) and where install puts it.
DOCS: dict[str, str] = {
    "man/suspendguard.8": "/usr/local/share/man/man8/suspendguard.8",
    "man/suspendguard.toml.5": "/usr/local/share/man/man5/suspendguard.toml.5",
    "completion/suspendguard": "/usr/local/share/bash-completion/completions/suspendguard",
    "completion/_suspendguard": "/usr/local/share/zsh/site-functions/_suspendguard",
}


def docs_dir(package: Path | None = None) -> Path:
    """The folder holding man/ and completion/: package data first, then the checkout."""
    here = package or Path(__file__).resolve().parents[1]
    for candidate in (here / "data", here.parent):
        if all((candidate / name).is_file() for name in DOCS):
            return candidate
    raise InstallError(
        f"the shipped man pages and completion are missing (looked for {', '.join(DOCS)} "
        f"in {here / 'data'} and {here.parent})"
    )
