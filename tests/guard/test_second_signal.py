"""One SIGINT per process across attempts: the next attempt never signals a job still saving.

A job whose save outlasts ``[drain] timeout_s`` makes the attempt veto while it saves on. The
next attempt (logind asking again, the user pressing suspend again) finds it still holding
the device: a second SIGINT would raise inside its save and lose the checkpoint.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.runners import guard

# Counts every SIGINT it gets; the first starts a 3 s save, which a second one interrupts
# (Python's own KeyboardInterrupt inside it): the checkpoint is then never written.
SAVER = r'''
import os, signal, sys, time
node, out = sys.argv[1], sys.argv[2]
held = open(node, "rb")
def on_sigint(signum, frame):
    fd = os.open(os.path.join(out, "signals.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"SIGINT\n")
    os.close(fd)
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)
print("ready", flush=True)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    pass
part = os.path.join(out, "checkpoint.part")
with open(part, "w") as f:
    for step in range(30):
        f.write(f"step {step}\n")
        f.flush()
        time.sleep(0.1)
os.rename(part, os.path.join(out, "checkpoint"))
'''


def test_a_job_still_saving_after_one_attempt_gets_no_second_sigint_from_the_next(
        make_config: Any, node: str, tmp_path: Path) -> None:
    job = subprocess.Popen([sys.executable, "-c", SAVER, node, str(tmp_path)],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        config = make_config(drain={"timeout_s": 1})
        first = guard(config)
        assert [r.code for r in first.verdict.reasons] == ["timeout-after-sigint"]
        # the look of the dry run says it before anything is asked
        look = guard(config, dry_run=True)
        [seen] = [h for h in look.holders if h.holder.pid == job.pid]
        assert any(f"attempt {first.attempt.id} (begun " in n and "sent SIGINT already" in n
                   for n in seen.decision.notes), seen.decision.notes
        second = guard(config)
        [reason] = second.verdict.reasons
        assert reason.code == "timeout-after-sigint"
        assert f"attempt {first.attempt.id} sent it SIGINT, and none is sent again" in reason.text
        assert job.wait(timeout=10) == 0
    finally:
        job.kill()
        job.wait()
    assert (tmp_path / "signals.log").read_text() == "SIGINT\n"
    assert (tmp_path / "checkpoint").read_text().splitlines()[-1] == "step 29"
