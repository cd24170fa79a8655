"""``accelerate launch`` on its single-process path: a bare ``Popen(cmd).wait()``, no handler.

Its stand-in is named ``accelerate`` as the built-in kind is told, and behaves as
accelerate's ``simple_launcher`` does: SIGINT raises KeyboardInterrupt in the wait,
and the training process is left running, never signalled.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import HOLDER, Holders
from helpers.runners import guard

# Starts the training script (the first word ending in holder.py) and waits for it; a SIGINT
# is written down, then ends the wait as Python's default handler does.
SIMPLE_ACCELERATE = """
import os, signal, subprocess, sys
at = next(i for i, word in enumerate(sys.argv) if word.endswith("holder.py"))
marker = sys.argv[sys.argv.index("--marker") + 1]
def interrupted(signum, frame):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} launcher SIGINT\\n")
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, interrupted)
job = subprocess.Popen([sys.executable, *sys.argv[at:]], stdout=subprocess.PIPE, text=True)
print("ready", os.getpid(), job.stdout.readline().split()[1], flush=True)
sys.exit(job.wait())
"""


@pytest.mark.parametrize("options", [
    ["--num_processes=1", "--num_machines=1"],
    ["--num-machines", "1", "--machine_rank", "0"],
    ["--num_machines", "2"],
], ids=["equals", "next-word", "several-machines"])
def test_accelerate_of_one_process_per_machine_signals_its_process(
        make_config: Any, node: str, holders: Holders, tmp_path: Path, options: list[str]
        ) -> None:
    """--num_machines does not take accelerate to torchrun's agent: its one process gets the
    signal from the guard, and accelerate, which would not forward it, gets none."""
    script = tmp_path / "accelerate"
    script.write_text(SIMPLE_ACCELERATE)
    launcher = subprocess.Popen(
        [sys.executable, str(script), "launch", *options, HOLDER, "--node", node, "--marker",
         holders.marker, "--delay", "0.3"], stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, rank = launcher.stdout.readline().split()
    report = guard(make_config(drain={"timeout_s": 3}))
    assert report.verdict.kind == "allow", report.verdict.texts
    assert holders.signals() == [f"{rank} SIGINT"]
    assert int(pid) == launcher.pid and launcher.wait(timeout=10) == 0  # its process left
