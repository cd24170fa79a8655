"""bash and zsh completion: shtab's static scripts of build_parser().

Static scripts, not a hook in the program: completing a word never starts
Python, and the guard imports nothing for completion.
"""

from __future__ import annotations

import argparse

from docgen.cli_page import all_parsers
from suspendguard.cli import build_parser

# What an argument completes to, by its metavar in build_parser().
COMPLETE_BY_METAVAR = {"PATH": "file", "DIR": "directory"}


def completing_parser() -> argparse.ArgumentParser:
    """build_parser(), with file and folder arguments marked for shtab."""
    import shtab

    complete = {"file": shtab.FILE, "directory": shtab.DIRECTORY}
    parser = build_parser()
    for p in all_parsers(parser):
        for action in p._actions:
            what = COMPLETE_BY_METAVAR.get(str(action.metavar))
            if what is not None:
                action.complete = complete[what]  # type: ignore[attr-defined]
    return parser


def bash_completion() -> str:
    import shtab

    return str(shtab.complete(completing_parser(), shell="bash"))


def zsh_completion() -> str:
    import shtab

    return str(shtab.complete(completing_parser(), shell="zsh"))
