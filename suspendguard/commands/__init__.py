"""The command table: each command's name, help, arguments and exit statuses, and where its code is.

Declaring a command costs only argparse: its implementation (the module
named in ``target``) is imported by the CLI when, and only when, the command
runs. ``suspendguard.cli.build_parser()`` turns this table into the parser,
so the help, the man pages and the shell completion all come from here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from suspendguard.model import SLEEP_ACTIONS

Arguments = Callable[[argparse.ArgumentParser], None]

USAGE_EXIT = (2, "bad usage, or the configuration is missing or invalid (one line says which)")
ERROR_EXIT = (3, "operational error: not root, systemd not running, ...")
UNTRUSTED_EXIT = (4, "run as root, the configuration (or a file it names) could be changed by "
                     "others: refused")
UNKNOWN_EXIT = (5, "unknown: the guard cannot tell (e.g. not root: processes it could not "
                   "inspect); never read as allow")


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    target: str  # "module:function" under suspendguard.commands, imported when it runs
    arguments: Arguments
    exits: tuple[tuple[int, str], ...]

    def epilog(self) -> str:
        return exits_text(self.exits)


def exits_text(exits: tuple[tuple[int, str], ...]) -> str:
    return "exit status:\n" + "\n".join(f"  {code}  {text}" for code, text in exits)


def _json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON (stable keys)")


def _wide(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wide", action="store_true",
                   help="print every table cell whole (default: fit the terminal, cut with …)")


def _check(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true",
                   help="accepted for compatibility: check never sends a signal")
    _json(p, "the report")
    _wide(p)


def _drain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true",
                   help="do not ask: signal the holders listed (needed without a terminal)")
    p.add_argument("--dry-run", action="store_true",
                   help="signal nobody: only show who would be signalled (the same as check)")
    _json(p, "the report")
    _wide(p)


def _pre_sleep(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", default="suspend", choices=SLEEP_ACTIONS,
                   metavar="ACTION",
                   help="suspend | hibernate | hybrid-sleep | suspend-then-hibernate")
    _json(p, "the report")


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more and finite: nan or inf would make a bound that never
    passes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, not {text!r}")
    return value


def _suspend(p: argparse.ArgumentParser) -> None:
    kind = p.add_mutually_exclusive_group()
    for action in SLEEP_ACTIONS[1:]:
        kind.add_argument(f"--{action}", dest="action", action="store_const", const=action,
                          help=f"{action} instead of suspend")
    p.set_defaults(action="suspend")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--dry-run", action="store_true",
                      help="do not sleep: show what the guard would do now (the check report)")
    when.add_argument("--when-ready", nargs="?", type=_seconds, const=600.0, metavar="SECONDS",
                      help="first wait, at most SECONDS (default 600), until the holders that "
                           "would veto have left by themselves; those the drain stops are "
                           "drained as usual")


def _nothing(p: argparse.ArgumentParser) -> None:
    return None


def _history(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", type=int, metavar="ID",
                   help="show this attempt whole: every reason, its holders, the jobs stopped "
                        "and what came after it")
    p.add_argument("-n", type=int, default=20, metavar="N", help="how many (default 20)")
    _json(p, "the attempts")
    _wide(p)


def _logs(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="files or folders (default: [logs] paths)")
    p.add_argument("--unit", action="append", metavar="UNIT",
                   help="also read this systemd unit's journal (the job's own output); repeatable")
    p.add_argument("--since", metavar="T", help="ISO 8601 time, or last-attempt")
    p.add_argument("--until", metavar="T", help="ISO 8601 time")
    p.add_argument("--verbose", action="store_true",
                   help="also list unrecognised vendor codes in failed lines (never findings)")
    p.add_argument("--explain", metavar="CODE",
                   help="explain a vendor code (EL0004, 507033, -8020): its meaning, the "
                        "catalog's rule or not a suspend failure, the remedy; reads no log")
    _json(p, "the findings")


def _status(p: argparse.ArgumentParser) -> None:
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the report as JSON (stable keys)")
    fmt.add_argument("--prometheus", action="store_true",
                     help="print the report in the Prometheus text exposition format")
    _wide(p)


def _install(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", metavar="DIR",
                   help="stage into DIR (same layout under DIR; systemctl is never called)")
    p.add_argument("--no-enable", action="store_true", help="do not enable the units")
    p.add_argument("--watch", action="store_true",
                   help="also install suspendguard-watch.service (a logind sleep block while the "
                        "guard would veto; docs/watch.md), enabled and started unless --no-enable")
    p.add_argument("--python", metavar="PATH",
                   help="the units' interpreter (default: this one; with --root: /usr/bin/python3)")
    p.add_argument("--force", action="store_true",
                   help="accept an interpreter under /tmp, /var/tmp or a home directory, or "
                        "one others could change (with a warning), or install beside a "
                        "package's unit")


def _uninstall(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", metavar="DIR", help="remove what install staged under DIR")
    p.add_argument("--purge", action="store_true",
                   help="also remove the config file and the history (kept by default)")


def _restore(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="start the jobs even when a device is unhealthy after resume")
    _json(p, "what was done")


def _doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", metavar="DIR",
                   help="read the host's files under DIR instead of / (a copy, an image)")
    _json(p, "the findings")
def _mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("mode", nargs="?", choices=("enforce", "observe", "off"), metavar="MODE",
                   help="enforce (drain, veto: the default) | observe (look and record, never signal "
                        "or refuse) | off (let every suspend go); none: show the mode")


def _watch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recheck", type=_seconds, default=60.0, metavar="S",
                   help="look again at least every S seconds, events or not (default 60)")
    p.add_argument("--debounce", type=_seconds, default=0.2, metavar="S",
                   help="wait S seconds after a node's open or close before looking (default 0.2)")


def _retry(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=SLEEP_ACTIONS, metavar="ACTION",
                   help="suspend | hibernate | hybrid-sleep | suspend-then-hibernate")
    p.add_argument("--attempt", type=int, required=True, metavar="ID",
                   help="the vetoed attempt (suspendguard history)")
    p.add_argument("--for", dest="bound", type=_seconds, default=900.0, metavar="S",
                   help="give up after S seconds (default 900)")


def _slurm(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="slurm_command", metavar="STEP", required=True)
    for name, help_ in (("suspend", "SuspendProgram, on the controller: ask each node's guard "
                                    "first; power down only the nodes it allows"),
                        ("resume", "ResumeProgram, on the controller: wake the nodes, check "
                                   "their accelerators, restart slurmd with -b")):
        q = sub.add_parser(name, help=help_, description=help_)
        q.add_argument("hostlist", metavar="HOSTLIST",
                       help="the nodes, as a Slurm hostlist expression (node[1-4])")
        if name == "resume":  # Slurm passes them after the hostlist (power_job_reboot)
            q.add_argument("features", nargs="?", metavar="FEATURES",
                           help="the features Slurm's node_features plugins ask the nodes "
                           "to boot with: not applied (said at WARNING), the nodes wake as "
                           "they are")
    sub.add_parser("sync", help="on the controller: SuspendExcNodes made to name the nodes the "
                   "guard drained (slurmctld re-reads its configuration when that changed)")
    sub.add_parser("health", help="HealthCheckProgram, on a node: drain it when its accelerator "
                   "is held outside Slurm or unhealthy; resume it when the guard drained it "
                   "and neither is so any more")
    node = sub.add_parser("node", help="a node's answers to the controller (one JSON object)")
    steps = node.add_subparsers(dest="node_command", metavar="STEP", required=True)
    prepare = steps.add_parser("prepare", help="drain the holders and give the verdict")
    prepare.add_argument("--suspend", action="store_true",
                         help="then, if allowed, ask logind to suspend")
    awake = steps.add_parser("awake", help="after a wake: the accelerators' health, and holders "
                             "outside Slurm")
    restart = steps.add_parser("restart", help="start again the jobs an attempt's drain stopped: "
                               "the node was not powered off")
    restart.add_argument("--attempt", type=int, required=True,
                         help="the attempt prepare answered with")
    rejoin = steps.add_parser("rejoin", help="restart slurmd so that the node registers")
    rejoin.add_argument("--boot", action="store_true",
                        help="with -b: report a boot (after a sleep)")
    for step in (prepare, awake, restart, rejoin):
        # The controller names the node it means: a wrong ssh mapping reaches another host,
        # whose guard must not drain, start jobs or restart slurmd there on that host's behalf.
        step.add_argument("--as", dest="as_node", metavar="NODE",
                          help="the node the controller asked for: a host that is another node "
                          "does nothing and answers unknown (exit 5)")


def _sleep_hook(p: argparse.ArgumentParser) -> None:
    p.add_argument("phase", choices=("pre", "post"), help="pre: before the sleep; post: after")
    p.add_argument("action", nargs="?", default="suspend", metavar="ACTION",
                   help="the sleep action systemd-sleep names (default suspend)")


COMMANDS: tuple[Command, ...] = (
    Command("check", "find holders and tell what the guard would do now; never signals",
            "check:check", _check,
            ((0, "the guard would allow a suspend now"),
             (1, "the guard would veto a suspend now (the reasons say why)"),
             USAGE_EXIT, ERROR_EXIT, UNTRUSTED_EXIT, UNKNOWN_EXIT)),
    Command("drain", "stop the holders now (SIGINT, after a confirmation) and give the verdict",
            "drain:drain", _drain,
            ((0, "drained: the accelerator is free (allow)"),
             (1, "not free: vetoed, or the question was answered no (nobody signalled)"),
             (2, "bad usage or configuration, or no terminal to ask on and no --yes"),
             ERROR_EXIT, UNTRUSTED_EXIT, UNKNOWN_EXIT)),
    Command("suspend", "ask logind to sleep and report what really happened",
            "suspend:suspend", _suspend,
            ((0, "slept and resumed (with --dry-run: the guard would allow)"),
             (1, "vetoed by the guard (with --dry-run: the guard would veto; with "
                 "--when-ready: still vetoed when its wait ended, no sleep asked for)"),
             USAGE_EXIT,
             (3, "logind or systemd refused or failed, or the sleep failed after the guard "
                 "allowed it"),
             UNTRUSTED_EXIT,
             (5, "with --when-ready or --dry-run: the guard cannot tell (e.g. not root: "
                 "processes it could not inspect); no sleep asked for"))),
    Command("pre-sleep", "the veto unit's step: run the guard before ACTION",
            "pre_sleep:pre_sleep", _pre_sleep,
            ((0, "allow: the suspend goes on"),
             (1, "veto: the unit fails, so systemd refuses the suspend"),
             USAGE_EXIT, ERROR_EXIT, UNTRUSTED_EXIT,
             (5, "unknown: the unit fails, so systemd refuses the suspend"))),
    Command("restore", "the resume unit's step: check the devices, then start again the "
            "supervised jobs the guard stopped",
            "restore:command", _restore,
            ((0, "every job the guard stopped was started again or skipped (or none was left)"),
             (1, "held: a device is unhealthy after resume, the jobs stay stopped "
                 "(restore --force starts them)"),
             USAGE_EXIT,
             (3, "a job failed to start, was not reached within the restore's time, or "
                 "still drains after the guard's signal (the next restore starts it once it "
                 "stopped), a systemd manager was not reloaded once the drain drop-ins went (its units "
                 "keep the drain's settings), or the history could not be read"),
             UNTRUSTED_EXIT)),
    Command("doctor", "check this host's suspend setup (read-only); each finding with its fix",
            "doctor:command", _doctor,
            ((0, "nothing to fix (notes may be printed)"),
             (1, "findings to fix (each line says what, and how)"),
             USAGE_EXIT, UNTRUSTED_EXIT)),
    Command("mode", "show or switch what the guard does at a suspend: enforce, observe, off",
            "mode:command", _mode,
            ((0, "shown, or switched; also with a configuration that is missing, invalid or "
                 "untrusted (said on stderr): then /var/lib/suspendguard's mode, the one the "
                 "veto unit reads"),
             (2, "bad usage"),
             (3, "not root (to switch it, or to show it when only root may read it), or the "
                 "state folder cannot be written"))),
    Command("config", "print the effective configuration as TOML",
            "config:command", _nothing, ((0, "printed"), USAGE_EXIT, UNTRUSTED_EXIT)),
    Command("history", "list recorded suspend attempts, newest first; with ID, show one whole",
            "history:history", _history,
            ((0, "listed (or nothing recorded yet)"),
             (2, "bad usage, no attempt ID, or the configuration is missing or invalid (one "
                 "line says which)"),
             (3, "the history cannot be read"), UNTRUSTED_EXIT)),
    Command("logs", "scan Ascend device logs for documented failures",
            "logs:command", _logs,
            ((0, "no documented failure found; with --explain: the code is known"),
             (1, "documented failures found (like grep); with --explain: the code is not in "
                 "the vendor code table"),
             (2, "bad usage, or a PATH that does not exist or cannot be read, or a file in a folder "
                 "typed that cannot be read (it says which; a link met in a folder is not "
                 "followed, and is no error)"),
             (3, "--since last-attempt: the history cannot be read"),
             UNTRUSTED_EXIT)),
    Command("status", "accelerators, holders, verdict, installation, logind, history",
            "status:command", _status,
            ((0, "the report was made (an invalid or untrusted configuration is reported in "
                 "it, as an unknown verdict)"),
             (2, "bad usage"))),
    Command("install", "install the veto units, the sleep hook and a default config",
            "install:command_install", _install,
            ((0, "installed"), USAGE_EXIT, ERROR_EXIT,
             (4, "run as root, the configuration (or a file it names) could be changed by "
                 "others, or the units' interpreter or the guard's code it imports: refused "
                 "(the interpreter, with --force: a warning)"))),
    Command("uninstall", "remove what install put in place",
            "install:command_uninstall", _uninstall,
            ((0, "removed"), USAGE_EXIT, ERROR_EXIT, UNTRUSTED_EXIT)),
    Command("watch", "hold a logind sleep block while the guard would veto a suspend "
            "(the suspendguard-watch service)",
            "watch:command", _watch,
            ((0, "stopped (SIGTERM, SIGINT or SIGHUP); the block released"), USAGE_EXIT,
             UNTRUSTED_EXIT)),
    Command("retry", "the retry unit's step ([notify] retry): ask for ACTION again once the "
            "transient cause of a veto cleared, while logind still wants it",
            "retry:command", _retry,
            ((0, "the sleep went ahead, or nothing is left to retry (the lid was opened, "
                 "someone used the machine, the veto's cause is certain)"),
             (1, "gave up: the cause was still there after --for, the sleep was vetoed "
                 "again (3 tries at most) or refused as unknown, or logind kept another sleep "
                 "in progress"),
             USAGE_EXIT, (3, "logind, systemd or the history could not be asked"),
             UNTRUSTED_EXIT)),
    Command("slurm", "a Slurm cluster's power saving through each node's guard: suspend, "
            "resume, sync, health (docs/slurm.md)",
            "slurm:command", _slurm,
            ((0, "every node was suspended, resumed or found healthy"),
             (1, "a node was held up (its guard refused), drained, or did not come back"),
             USAGE_EXIT,
             (3, "scontrol or slurmctld failed, or the SuspendExcNodes file could not be kept"),
             UNTRUSTED_EXIT,
             (5, "slurm health or a node's answer: a device's health could not be read"))),
    Command("sleep-hook", "called by systemd-sleep: sleep-hook pre|post ACTION",
            "sleep_hook:command", _sleep_hook,
            ((0, "always once it ran (systemd-sleep ignores a hook's status)"),
             (2, "bad usage or configuration"), UNTRUSTED_EXIT)),
)

BY_NAME = {c.name: c for c in COMMANDS}
