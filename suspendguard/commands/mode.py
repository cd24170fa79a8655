"""``suspendguard mode [enforce|observe|off]``: show or switch what the guard does at a suspend."""

from __future__ import annotations

import argparse
import os

from suspendguard.commands.context import Context
from suspendguard.errors import EXIT_ERROR, ConfigError
from suspendguard.store import mode as guard_mode
from suspendguard.system.terminal import safe

MEANING = {
    "enforce": "each suspend waits until the accelerator's holders are drained; a suspend the guard "
               "cannot make safe is refused",
    "observe": "each suspend is looked at and recorded (suspendguard history) as check would; nobody "
               "is signalled and no suspend is refused",
    "off": "suspends are not guarded: the guard lets each one go without a look",
}


def command(args: argparse.Namespace, ctx: Context) -> int:
    try:
        state_dir = ctx.config().state.dir
    except ConfigError as exc:
        # The off switch works whatever the configuration says (missing, invalid or
        # untrusted: exit status 0, not 2 or 4): the veto unit reads the mode in its own
        # folder while the configuration cannot be loaded.
        state_dir = guard_mode.UNIT_STATE_DIR
        ctx.err.write(f"suspendguard: {safe(str(exc))}; the mode is {state_dir}'s, which the "
                      "veto unit reads until the configuration loads again\n")
    path = os.path.join(state_dir, guard_mode.MODE_NAME)
    if args.mode is None:
        if guard_mode.hidden(state_dir):
            ctx.err.write(f"suspendguard: mode: {path}: permission denied: only root can read "
                          "the guard's mode (sudo suspendguard mode)\n")
            return EXIT_ERROR
        current = guard_mode.read(state_dir)
        if current.problem:
            ctx.err.write(f"suspendguard: {current.problem}\n")
        ctx.out.write(f"{current.name}: {MEANING[current.name]}\n")
        return 0
    if os.geteuid() != 0:
        ctx.err.write(f"suspendguard: mode {args.mode}: only root can switch the guard's mode\n")
        return EXIT_ERROR
    try:
        guard_mode.write(state_dir, args.mode)
    except OSError as exc:
        # makedirs says "File exists" (EEXIST) of a file where the folder should be.
        why = "not a directory" if isinstance(exc, FileExistsError) else exc.strerror
        where = path if exc.filename2 else (exc.filename or state_dir)  # replace(): the mode's
        ctx.err.write(f"suspendguard: mode {args.mode}: {where}: {why}\n")
        return EXIT_ERROR
    ctx.out.write(f"{args.mode}: {MEANING[args.mode]}\n")
    return 0
