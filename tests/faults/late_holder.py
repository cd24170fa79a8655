"""Two jobs whose order the test fixes through a marker file, no clock involved.

    late_holder.py first NODE MARKER
        holds NODE (a compute node); on SIGINT marks "SIGINT" and exits once
        "opened" is in MARKER
    late_holder.py late MANAGEMENT NODE MARKER
        holds MANAGEMENT only; once "SIGINT" is in MARKER it opens NODE too and
        marks "opened"; SIGINT ends it (marked "late SIGINT")

Each prints "ready PID" once it holds its first node.
"""

import os
import sys
import time


def mark(marker: str, what: str) -> None:
    with open(marker, "a") as f:
        f.write(f"{os.getpid()} {what}\n")


def until(marker: str, word: str) -> None:
    while True:
        try:
            with open(marker) as f:
                if word in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)


role, *paths = sys.argv[1:]
held = [open(paths[0], "rb")]  # noqa: SIM115 - held for the life of the job
print(f"ready {os.getpid()}", flush=True)
marker = paths[-1]
try:
    if role == "late":
        until(marker, "SIGINT")
        held.append(open(paths[1], "rb"))  # noqa: SIM115 - held likewise
        mark(marker, "opened")
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    if role == "first":
        mark(marker, "SIGINT")
        until(marker, "opened")
    else:
        mark(marker, "late SIGINT")
