"""suspendguard(8): argparse-manpage's page of build_parser(), with the sections argparse lacks."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator

from docgen import roff
from suspendguard import __version__
from suspendguard.cli import build_parser
from suspendguard.commands import COMMANDS
from suspendguard.config import DEFAULT_PATH, DEFAULT_STATE_DIR, ENV_VAR
from suspendguard.install.manifest import MANIFEST_PATH
from suspendguard.install.templates import HOOK_PATH, UNIT_TEMPLATE
from suspendguard.store.history import DB_NAME

# The terminal's width must not change the page: argparse wraps usage lines
# at $COLUMNS otherwise.
WIDTH = 80

SUMMARY = "pre-suspend guard for hosts with AI accelerators"

# After the parser's own description, which opens the section.
DESCRIPTION = roff.paragraphs(
    """Before the system sleeps, suspendguard finds every process holding an
    accelerator (Huawei Ascend NPUs, NVIDIA GPUs), asks each to stop with
    SIGINT, waits for it to exit, confirms through the device's own queries
    (pyACL, npu-smi, DCMI, NVML) that the hardware is idle, and only then lets
    the suspend go on. Otherwise it vetoes the suspend and says why, in the
    journal, in its history and on the terminal.""",
    f"""It runs as the unit `{UNIT_TEMPLATE}`, one instance per sleep action,
    ordered before `systemd-ACTION.service`: when the guard vetoes, the unit
    fails and systemd does not suspend. The sleep hook `{HOOK_PATH}` records
    the resume and reads the device logs for the failures the vendor
    documents.""",
    """`suspendguard check --dry-run` shows what a suspend would do now, and
    sends no signal. The configuration is described in suspendguard.toml(5).""",
)

def _exit_status() -> str:
    """Each command's exit statuses, from the same table its --help epilog is made of."""
    lines = []
    for command in COMMANDS:
        codes = "; ".join(f"{code}: {text}" for code, text in command.exits)
        lines.append(roff.tagged(roff.bold(command.name), codes))
    return "\n".join(lines)


EXIT_STATUS = _exit_status()

ENVIRONMENT = "\n".join([
    roff.tagged(roff.bold(ENV_VAR),
                f"The configuration file, when `--config` is not given (default `{DEFAULT_PATH}`)."),
    roff.tagged(roff.bold("NO_COLOR"), "Set: `status` uses no colour, even on a terminal."),
    roff.tagged(roff.bold("DBUS_SYSTEM_BUS_ADDRESS"), "The system bus `status` asks logind and systemd on."),
])

FILES = "\n".join([
    roff.tagged(roff.italic(DEFAULT_PATH), "The configuration; see suspendguard.toml(5)."),
    roff.tagged(roff.italic(f"{DEFAULT_STATE_DIR}/{DB_NAME}"),
                "The history of suspend attempts (`[state] dir`)."),
    roff.tagged(roff.italic(MANIFEST_PATH), "What `suspendguard install` wrote; `uninstall` removes it."),
    roff.tagged(roff.italic(f"/etc/systemd/system/{UNIT_TEMPLATE}"),
                "The veto unit written by `suspendguard install` "
                "(a package ships it in /usr/lib/systemd/system)."),
    roff.tagged(roff.italic(HOOK_PATH), "The sleep hook."),
])

SEE_ALSO = (
    "suspendguard.toml(5), systemd\\-suspend.service(8), systemd\\-sleep(8), "
    "systemd.special(7), journalctl(1)"
)


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_parsers(sub)


def fixed_width(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser, and every subcommand's, formatting at WIDTH columns whatever the terminal."""
    for p in all_parsers(parser):
        p.formatter_class = functools.partial(argparse.HelpFormatter, width=WIDTH)
    return parser


def cli_page(date: str) -> str:
    from argparse_manpage.manpage import Manpage

    parser = fixed_width(build_parser())
    # argparse-manpage would print the parser's description after ours: it opens the section instead.
    description = roff.paragraphs(parser.description or "") + "\n.PP\n" + DESCRIPTION
    parser.description = None
    page = Manpage(parser, _data={
        "project_name": "suspendguard",
        "version": __version__,
        "date": date,
        "manual_title": "System Administration",
        "manual_section": 8,
        "description": SUMMARY,
    })
    page.add_section("description", "=", description)
    for heading, content in (("exit status", EXIT_STATUS), ("environment", ENVIRONMENT),
                             ("files", FILES), ("see also", SEE_ALSO)):
        page.add_section(heading, "=", content)
    return str(page)
