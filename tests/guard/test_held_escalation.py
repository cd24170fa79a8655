"""A held launcher that holds a node itself, through the escalation (``[drain] escalate``).

The steps go to the holders, not to the launcher stopped while its ranks leave: a signal sent to
it there stays pending, the step's wait runs out on a launcher that cannot leave, and once
continued after that veto the pending signal ends it. Once its rank left at a step, it is
continued and gets its one ``[drain] signal``, as it does when its ranks left within the wait.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from helpers.holders import HOLDER, Holders
from helpers.runners import guard

# DeepSpeed's shape: holds the node itself, starts one rank (helpers/holder.py) that saves for
# argv[4] seconds after its SIGINT, writes each SIGINT it gets down and waits for its rank.
LAUNCHER = """# a launcher held through the escalation
import os, signal, subprocess, sys
node, holder, marker, save_s = sys.argv[1:5]
f = open(node, "rb")
rank = subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                         "--delay", save_s], stdout=subprocess.PIPE, text=True)
def on_sigint(_signum, _frame):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} launcher SIGINT\\n")
signal.signal(signal.SIGINT, on_sigint)
line = rank.stdout.readline()
print(f"ready {os.getpid()} rank {line.split()[1]}", flush=True)
rank.wait()
"""


def test_a_held_launcher_is_continued_and_signalled_once_its_rank_left_at_a_step(
        make_config: Any, node: str, holders: Holders) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, node, HOLDER, holders.marker,
                                 "30"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, _rank, rank = launcher.stdout.readline().split()
    config = make_config(drain={"timeout_s": 0.5, "escalate": ["SIGTERM:5"], "launchers": [
        {"cmdline": "a launcher held through the escalation", "stop": "hold",
         "name": "held-launcher"}]})
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    outcomes = {str(h.decision.holder.pid): h.outcome for h in report.holders}
    assert outcomes[rank].kind == "exited" and "SIGTERM" in outcomes[rank].why, outcomes[rank]
    assert (outcomes[pid].kind, outcomes[pid].signalled) == ("exited", True), outcomes[pid]
    # It left on its own SIGINT, sent once its rank had gone: never the step's SIGTERM.
    assert launcher.wait(timeout=10) == 0
    assert holders.signals() == [f"{rank} SIGINT", f"{pid} launcher SIGINT"]
