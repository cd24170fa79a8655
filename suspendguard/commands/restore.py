"""``restore``: the resume unit's step: start again the supervised jobs the guard stopped."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from suspendguard.config import RESTORE_AFTER_RESUME_S
from suspendguard.errors import EXIT_ERROR, HistoryError
from suspendguard.guard.restore import restore
from suspendguard.guard.supervise import Supervisors
from suspendguard.store.history import History
from suspendguard.store.rows import StopRow
from suspendguard.system.deadline import Deadline, bounded
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

if TYPE_CHECKING:
    from suspendguard.commands.context import Context


def command(args: argparse.Namespace, ctx: Context) -> int:
    """0 when every job was started, is starting, was skipped or left down; 3 when one failed
    to start or history failed."""
    config = ctx.config()
    log = Logger(ctx.err, ctx.environ)
    try:
        history = History.open(config.state.dir)
    except HistoryError as exc:
        log.error(f"restore: cannot read what was stopped: {exc}")
        return EXIT_ERROR
    with history:
        pending = history.pending_stops()

        def note(stop: StopRow, result: str, why: str) -> None:
            history.record_restore(stop.id, result, why)

        supervisors = Supervisors(environ=ctx.environ, state_dir=config.state.dir)
        # Inside the resume unit's TimeoutStartSec: a start still running
        # when the budget ends is "starting", one not reached stays pending.
        with bounded(Deadline(time.monotonic() + RESTORE_AFTER_RESUME_S)):
            done = restore(pending, supervisors, config.restore,
                           enabled=config.restore.after_resume, record=note, log=log.info,
                           boot_id=ProcFS().boot_id())
            # Whatever is still set aside (a killed run's drop-in, the restart
            # policy of a container left down) goes back now.
            for line in supervisors.clean_leftovers():
                log.warning(line)
    if args.json:
        json.dump({"restored": [{**d.stop.to_json(), "result": d.result, "why": d.why}
                                for d in done]}, ctx.out, indent=2)
        ctx.out.write("\n")
    elif not done:
        ctx.out.write("nothing to restore\n")
    return EXIT_ERROR if any(d.result == "failed" for d in done) else 0
