"""The man pages, the shell completion and the configuration page's key table, generated.

Everything here is read off the program's own definitions:
``suspendguard.cli.build_parser()`` for the command (man page, bash and zsh
completion) and the config schema (``suspendguard.config.schema``) for the
configuration file's page and docs/configuration.md's table of keys. The results are
committed (``man/``, ``completion/``): the packages and ``suspendguard
install`` ship those files and need no generator at build time.
``tools/gen-docs`` rewrites them; tests/docs/test_docs.py regenerates them and
fails when a committed file differs, so they cannot drift from the parser.

The generators (argparse-manpage, shtab) are in the ``docs`` extra and the
``test`` extra, pinned: a new version is a deliberate regeneration.

Nothing at run time needs them, so they live here in tools/, outside the
package that the wheel and the distribution packages ship.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from docgen.cli_page import cli_page
from docgen.completion import bash_completion, zsh_completion
from docgen.config_page import config_page, with_keys_table

# Each generated file, by its path in the repository.
GENERATED: dict[str, Callable[[str], str]] = {
    "man/suspendguard.8": cli_page,
    "man/suspendguard.toml.5": config_page,
    "completion/suspendguard": lambda _date: bash_completion(),
    "completion/_suspendguard": lambda _date: zsh_completion(),
}

# Generated in part: its table of configuration keys.
KEYS_PAGE = "docs/configuration.md"


def release_date(repo: Path) -> str:
    """The date of the newest entry of debian/changelog, as YYYY-MM-DD.

    A fixed date, not today's: regenerating the same release gives the same bytes.
    """
    import email.utils

    for line in (repo / "debian" / "changelog").read_text(encoding="utf-8").splitlines():
        if line.startswith(" -- ") and "  " in line[4:]:
            when = email.utils.parsedate_to_datetime(line[4:].split("  ", 1)[1].strip())
            return when.strftime("%Y-%m-%d")
    raise ValueError(f"{repo / 'debian' / 'changelog'}: no trailer line with a date")


def generate(repo: Path) -> dict[str, str]:
    """Every generated file's text, by its path in the repository."""
    date = release_date(repo)
    files = {path: make(date) for path, make in GENERATED.items()}
    files[KEYS_PAGE] = with_keys_table((repo / KEYS_PAGE).read_text(encoding="utf-8"))
    return files
