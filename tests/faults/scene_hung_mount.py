"""A device log folder on a mount that never answers, read after resume; run in a mount
namespace of its own.

    unshare --mount --propagation private python scene_hung_mount.py FOLDER

Mounts FUSE on FOLDER/hung and never reads its /dev/fuse descriptor: every lookup there
waits in the kernel, as on an NFS home whose server is gone. FOLDER/slog holds a device
log with a documented failure. Runs the after-resume read of both globs, the hung one
first, with one second for the files; prints one JSON line: the findings' rules and what
was not read.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from suspendguard.config import build
from suspendguard.logs import after, search

START = datetime(2026, 3, 1, 12, 0, 0)
HWTS = ("[ERROR] TSCH(-1,null):2026-03-01-12:00:01.000.000 1 (dieid:0,cpuid:0) "
        "device_management_plat.c:563 suspend_ack: suspend pre check fail, hwts is busy\n")
MNT_DETACH = 2


def main(folder: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    hung = folder / "hung"
    hung.mkdir()
    slog = folder / "slog"
    slog.mkdir()
    (slog / "device-0.log").write_text(HWTS)
    server = os.open("/dev/fuse", os.O_RDWR)
    opts = f"fd={server},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"suspendguard-test", str(hung).encode(), b"fuse", 0, opts) != 0:
        print(json.dumps({"skip": os.strerror(ctypes.get_errno())}))
        return
    try:
        after.FILES_DEADLINE_S = 1.0
        search.ANSWER_S = 1.0
        config = build({"logs": {"paths": [f"{hung}/log/**", f"{slog}/**"]}})
        result = after.after_attempt(config, START, until=START + timedelta(seconds=30))
        print(json.dumps({"rules": [f.rule for f in result.findings],
                          "files_read": result.files_read,
                          "skipped": [[s.path, s.reason] for s in result.skipped],
                          "nothing_found": result.nothing_found()}))
    finally:
        os.close(server)  # the connection aborts: whatever still waits there gets an error
        libc.umount2(str(hung).encode(), MNT_DETACH)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
