"""Which launcher a command line runs, and how it is stopped (guard/jobs.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import HOLDER, SLOW_FAMILY, Holders
from helpers.isolation import ROOT
from helpers.runners import guard
from helpers.wait import wait_for
from test_policy import holder

from suspendguard.config import DevicesConfig
from suspendguard.guard.advice import killed_by_agent, timeout_remedy
from suspendguard.guard.inventory import take_inventory
from suspendguard.guard.job_stop import JobStop
from suspendguard.guard.jobs import Job, Launcher, Plan, plan
from suspendguard.guard.launchers import BUILTIN, builtin_kind
from suspendguard.guard.scan import scan_holders
from suspendguard.model import Decision, Outcome, holder_id
from suspendguard.system import kcmp
from suspendguard.system.procfs import ProcFS


@pytest.mark.parametrize(("argv", "exe", "name", "stop"), [
    (["/usr/bin/python3", "/usr/bin/torchrun", "--nproc_per_node", "2", "t.py"],
     "/usr/bin/python3.11", "torchrun", "forward"),
    (["python3", "-m", "torch.distributed.run", "t.py"], "/usr/bin/python3.11", "torchrun",
     "forward"),
    (["python", "-u", "-m", "torch.distributed.launch", "t.py"], "/usr/bin/python3.11",
     "torchrun", "forward"),
    # Python's options that take the next word as their value.
    (["python3", "-W", "ignore", "-m", "torch.distributed.run", "t.py"], "/usr/bin/python3.11",
     "torchrun", "forward"),
    (["python3", "-X", "faulthandler", "/usr/bin/torchrun", "t.py"], "/usr/bin/python3.11",
     "torchrun", "forward"),
    (["python3", "--check-hash-based-pycs", "never", "-m", "deepspeed.launcher.launch", "t.py"],
     "/usr/bin/python3.10", "deepspeed", "hold"),
    (["python3", "-mtorch.distributed.run", "t.py"], "/usr/bin/python3.11", "torchrun",
     "forward"),
    (["/opt/venv/bin/python", "/opt/venv/bin/accelerate", "launch", "--multi_gpu", "t.py"],
     "/usr/bin/python3.10", "accelerate", "forward"),
    (["accelerate", "launch", "--num_processes", "4", "t.py"], "/usr/bin/python3.10",
     "accelerate", "forward"),
    (["accelerate", "launch", "t.py"], "/usr/bin/python3.10", "accelerate", "ranks"),
    # The script's own options are not accelerate's: one process, whatever they say.
    (["/opt/venv/bin/python", "/opt/venv/bin/accelerate", "launch", "--mixed_precision", "bf16",
      "t.py", "--use_fsdp", "--num_processes", "4"], "/usr/bin/python3.10", "accelerate",
     "ranks"),
    (["python3", "-m", "accelerate.commands.launch", "--cpu", "t.py", "--multi_gpu"],
     "/usr/bin/python3.10", "accelerate", "ranks"),
    (["accelerate", "launch", "-m", "--num_processes=2", "trainer"], "/usr/bin/python3.10",
     "accelerate", "forward"),
    # --num_machines never picks accelerate's launcher: its value is skipped, not counted.
    (["accelerate", "launch", "--num_processes=1", "--num_machines=1", "--machine_rank=0",
      "trainable.py"], "/usr/bin/python3.10", "accelerate", "ranks"),
    (["accelerate", "launch", "--num_machines", "1", "trainable.py"], "/usr/bin/python3.10",
     "accelerate", "ranks"),
    (["accelerate", "launch", "--num-machines=2", "trainable.py"], "/usr/bin/python3.10",
     "accelerate", "ranks"),
    (["accelerate", "launch", "--num_machines", "2", "--num-processes", "8", "t.py"],
     "/usr/bin/python3.10", "accelerate", "forward"),
    (["accelerate", "launch", "--use-fsdp", "t.py", "--cpu"], "/usr/bin/python3.10",
     "accelerate", "forward"),
    # Each multi-process path is taken only without --cpu.
    (["accelerate", "launch", "--cpu", "--num_processes", "4", "--multi_gpu", "t.py"],
     "/usr/bin/python3.10", "accelerate", "ranks"),
    (["python3", "-m", "deepspeed.launcher.launch", "t.py"], "/usr/bin/python3.10",
     "deepspeed", "hold"),
    (["/usr/bin/python3", "/usr/local/bin/msrun", "--worker_num", "8", "t.py"],
     "/usr/bin/python3.9", "msrun", "hold"),
    (["mpirun", "-np", "2", "python3", "t.py"], "/usr/bin/orterun", "mpirun", "ranks"),
    (["mpiexec.hydra", "-n", "2", "a.out"], "/usr/bin/mpiexec.hydra", "mpirun", "ranks"),
])
def test_builtin_launchers(argv: list[str], exe: str, name: str, stop: str) -> None:
    kind = builtin_kind(argv, exe)
    assert kind is not None and (kind.name, kind.stop) == (name, stop)


@pytest.mark.parametrize("argv", [
    ["python3", "train.py", "--launcher", "torchrun"],  # names it, runs something else
    ["python3", "-c", "import torchrun"],
    ["bash", "-c", "torchrun t.py"],  # a shell: the launcher is its child, if any
    ["python3", "tests/helpers/launcher.py", "--shape", "torchrun"],
])
def test_not_launchers(argv: list[str]) -> None:
    assert builtin_kind(argv, "/usr/bin/python3.11") is None


# A parent holding the node, and a child in its process group that holds it too:
# through the parent's own open file (fork), or through one it opened itself.
FAMILY = """
import os, subprocess, sys, time
node = open(sys.argv[1], "rb")
if sys.argv[2] == "fork":
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
else:
    opened = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); "
                               "print('open', flush=True); time.sleep(60)", sys.argv[1]],
                              stdout=subprocess.PIPE, text=True)
    assert opened.stdout.readline() == "open\\n"  # it holds the node now
    child = opened.pid
print(os.getpid(), child, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(("how", "worker"), [("fork", True), ("open", False)])
def test_a_worker_is_a_child_that_holds_its_parents_open_file(node: str, how: str,
                                                              worker: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-c", FAMILY, node, how], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        parent, child = map(int, proc.stdout.readline().split())
        inventory = take_inventory(DevicesConfig((), (node,), ()))
        holders = [h for h in scan_holders(inventory).holders if h.pid in (parent, child)]
        assert {h.pid for h in holders} == {parent, child}
        p = plan(holders, ProcFS())
        (c,) = [h for h in holders if h.pid == child]
        found = p.role(c)
        assert (found is not None and found[0] == "worker") is worker, p
        assert {h.pid for h in p.signalled()} == ({parent} if worker else {parent, child})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_worker_is_told_by_its_parents_node_where_kcmp_cannot_tell(
        node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """kcmp refused (a kernel without it, a seccomp filter): a forked child of the parent's
    uid and process group, holding the node its parent holds, is still a worker, and its
    line says how it was told."""
    monkeypatch.setattr(kcmp, "same_file", lambda *_: None)
    proc = subprocess.Popen([sys.executable, "-c", FAMILY, node, "fork"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        parent, child = map(int, proc.stdout.readline().split())
        inventory = take_inventory(DevicesConfig((), (node,), ()))
        holders = [h for h in scan_holders(inventory).holders if h.pid in (parent, child)]
        p = plan(holders, ProcFS())
        (c,) = [h for h in holders if h.pid == child]
        found = p.role(c)
        assert found is not None and found[0] == "worker", p
        assert [h.pid for h in p.signalled()] == [parent]
        assert "kcmp could not compare their fds" in p.note(c), p.note(c)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rfind(b")") + 2:][:1] == b"Z"


# A rank that maps the node and forks a DataLoader worker, which closes the fd it inherited
# and keeps the mapping (Megatron-LM#3684's worker_init_fn): the worker holds the node by the
# mapping alone. The worker leaves once its parent has; every SIGINT either takes is
# written down.
MAPPED_FAMILY = """
import os, signal, sys, time
node, marker, helpers = sys.argv[1:4]
sys.path.insert(0, helpers)
from mapping import map_page
f = open(node, "rb")
map_page(f.fileno())
def mark(what):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} {what}\\n")
ready_r, ready_w = os.pipe()
parent = os.getpid()
child = os.fork()
if child == 0:
    f.close()
    signal.signal(signal.SIGINT, lambda *_: mark("SIGINT"))
    os.write(ready_w, b"x")
    while os.getppid() == parent:
        time.sleep(0.05)
    os._exit(0)
os.read(ready_r, 1)  # the worker's fd is closed
try:
    print(parent, child, flush=True)
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    mark("SIGINT")
    time.sleep(0.5)  # its save
"""


def test_a_child_that_holds_its_parents_node_by_a_mapping_alone_is_a_worker(
        make_config: Any, holders: Holders, tmp_path: Any) -> None:
    if ROOT:  # a node that can be mapped: /dev/zero's
        node = str(tmp_path / "zero0")
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, 5))
    else:
        node = str(tmp_path / "stand-in")
        (tmp_path / "stand-in").write_bytes(b"\0" * 4096)
    proc = subprocess.Popen([sys.executable, "-c", MAPPED_FAMILY, node, holders.marker,
                             os.path.dirname(HOLDER)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(proc)
    assert proc.stdout is not None
    parent, child = map(int, proc.stdout.readline().split())
    holders.extra_pids.append(child)
    inventory = take_inventory(DevicesConfig((), (node,), ()))
    found = [h for h in scan_holders(inventory).holders if h.pid in (parent, child)]
    (c,) = [h for h in found if h.pid == child]
    assert {n.via for n in c.nodes} == {"map"}, c.nodes
    p = plan(found, ProcFS())
    role = p.role(c)
    assert role is not None and role[0] == "worker", p
    assert [h.pid for h in p.signalled()] == [parent]
    report = guard(make_config(devices={"nodes": [node]}))
    assert holders.signals() == [f"{parent} SIGINT"]  # the worker got none
    assert report.verdict.kind == "allow", report.verdict.texts
    assert proc.wait(timeout=10) == 0
    assert wait_for(lambda: _gone(child), 10), "the worker did not leave with its parent"
    outcomes = {r.decision.holder.pid: r.outcome.kind for r in report.holders}
    assert outcomes == {parent: "exited", child: "exited"}, outcomes


# A forwarding launcher that itself holds the node (a launcher that opened
# the device before it started its rank, e.g. to count the GPUs): it is a
# holder and the rank's launcher at once. Every SIGINT it gets is written
# down; it passes each on to its rank (forward), or SIGTERMs it as DeepSpeed's
# sigkill_handler does (terminate: it then writes down how its rank ended),
# then waits for it. Its rank saves for argv[5] seconds (0.5 by default).
HOLDING_LAUNCHER = """
import os, signal, subprocess, sys
node, holder, marker, mode = sys.argv[1:5]
f = open(node, "rb")
rank = subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                         "--delay", (sys.argv[5:] or ["0.5"])[0]], stdout=subprocess.PIPE, text=True)
def forward(signum, _frame):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} launcher SIGINT\\n")
    if mode != "hold":
        rank.send_signal(signum if mode == "forward" else signal.SIGTERM)
signal.signal(signal.SIGINT, forward)
line = rank.stdout.readline()
print(f"ready {os.getpid()} rank {line.split()[1]}", flush=True)
code = rank.wait()
if mode == "terminate":
    with open(marker, "a") as m:
        m.write(f"{rank.pid} exited {code}\\n")
"""


def _start_launcher(holders: Holders, script: str, node: str,
                    *args: str) -> tuple[subprocess.Popen[str], str, str]:
    """One of the launchers above, run on ``node``: it, its pid, and its first rank's pid."""
    launcher = subprocess.Popen([sys.executable, "-c", script, node, HOLDER, holders.marker,
                                 *args], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, _rank, rank = launcher.stdout.readline().split()
    return launcher, pid, rank


@pytest.mark.parametrize("stop", ["forward", "hold"])
def test_a_launcher_that_holds_a_node_gets_one_signal_and_leaves(
        make_config: Any, node: str, holders: Holders, stop: str) -> None:
    """Forward: the launcher's one signal is both its own and its rank's. Hold: it is
    stopped while its rank leaves, then continued to act on its own signal and leave."""
    launcher, pid, rank = _start_launcher(holders, HOLDING_LAUNCHER, node, stop)
    config = make_config(drain={"launchers": [
        {"cmdline": "import os, signal, subprocess", "stop": stop,
         "name": "holding-launcher"}]})
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert launcher.wait(timeout=10) == 0
    # One SIGINT to each, never two.
    assert sorted(holders.signals()) == sorted([f"{pid} launcher SIGINT", f"{rank} SIGINT"])
    if stop == "hold":  # stopped, the launcher acted on its signal only after its rank left
        assert holders.signals() == [f"{rank} SIGINT", f"{pid} launcher SIGINT"]


def test_a_stopped_launcher_holding_a_node_is_continued_unsignalled_while_its_rank_saves(
        make_config: Any, node: str, holders: Holders) -> None:
    """DeepSpeed's or msrun's shape, its rank still saving at the wait's end (a veto): the
    launcher is continued; a SIGINT sent to it beside its rank would have been acted on then,
    and SIGTERMed the save."""
    launcher, pid, rank = _start_launcher(holders, HOLDING_LAUNCHER, node, "terminate", "2")
    config = make_config(drain={"timeout_s": 0.5, "launchers": [
        {"cmdline": "import os, signal, subprocess", "stop": "hold",
         "name": "terminating-launcher"}]})
    look = guard(config, dry_run=True)
    [seen] = [h for h in look.holders if str(h.holder.pid) == pid]
    assert "stopped (SIGSTOP) while its ranks leave" in seen.outcome.why, seen.outcome
    report = guard(config)
    [reason] = [r for r in report.verdict.texts if r.startswith(f"pid {rank} ")]
    assert (f"a rank of terminating-launcher (pid {pid}), which was stopped while its ranks left "
            "and is continued now: it acts on its ranks when one leaves, so this rank may not "
            "finish its save") in reason, reason
    assert launcher.wait(timeout=10) == 0
    assert holders.signals() == [f"{rank} SIGINT", f"{rank} exited 0"]


# A launcher that forwards SIGINT to its rank and then starts another (an elastic restart):
# the new rank holds the node when the drain rescans. The new one is a fork that holds the
# node at once and leaves on SIGINT as helpers/holder.py does: a fresh interpreter's start-up
# on a loaded machine can outlast the guard's respawn grace before its rescan.
RESTARTING_LAUNCHER = """# a restarting launcher
import os, signal, subprocess, sys, time, traceback
node, holder, marker = sys.argv[1:4]
rank = subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                         "--delay", "0.2"], stdout=subprocess.PIPE, text=True)
rank.stdout.readline()
again = []  # the pid of the rank started after the forward
def mark(what):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} {what}\\n")
def leave(_signum, _frame):
    mark("SIGINT")
    time.sleep(0.2)  # its save, as the first rank's --delay
    os._exit(0)
def rank_again():
    signal.signal(signal.SIGINT, leave)  # before it holds the node
    try:
        held = open(node, "rb")
    except OSError:
        traceback.print_exc()
        os._exit(1)  # never on into the launcher's own code
    while held:
        signal.pause()
def forward(signum, _frame):
    mark("launcher SIGINT")
    rank.send_signal(signum)
    if not again:
        pid = os.fork()
        if pid == 0:
            rank_again()
        again.append(pid)
signal.signal(signal.SIGINT, forward)
print(f"ready {os.getpid()} rank {rank.pid}", flush=True)
while rank.poll() is None:
    time.sleep(0.05)
while again and os.waitpid(again[0], os.WNOHANG)[0] == 0:
    time.sleep(0.05)
"""


def test_a_launcher_signalled_once_is_not_signalled_again_for_a_rank_it_started_since(
        make_config: Any, node: str, holders: Holders) -> None:
    launcher, pid, first = _start_launcher(holders, RESTARTING_LAUNCHER, node)
    config = make_config(drain={"rounds": 3, "launchers": [
        {"cmdline": "a restarting launcher", "stop": "forward", "name": "restarting-launcher"}]})
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert launcher.wait(timeout=10) == 0
    signals = holders.signals()
    assert signals.count(f"{pid} launcher SIGINT") == 1, signals
    # The first rank got it from the launcher; the new one from the guard: each once.
    ranks = [s for s in signals if s != f"{pid} launcher SIGINT"]
    assert f"{first} SIGINT" in ranks and len(ranks) == len(set(ranks)) == 2, signals



# A launcher that forwards SIGINT to its two ranks: the first holds the node from the start,
# the second (still starting) opens it only on its SIGINT, for its save.
LATE_OPENING_LAUNCHER = """# a late-opening launcher
import os, signal, subprocess, sys, time
node, holder, marker = sys.argv[1:4]
late = ("import os, signal, sys, time\\n"
        "def save(*_):\\n"
        "    open(sys.argv[2], 'a').write(f'{os.getpid()} SIGINT\\\\n')\\n"
        "    f = open(sys.argv[1], 'rb'); time.sleep(1.5); sys.exit(0)\\n"
        "signal.signal(signal.SIGINT, save)\\n"
        "print('ready', flush=True)\\n"
        "while True: time.sleep(1)\\n")
ranks = [subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                           "--delay", "0.1"], stdout=subprocess.PIPE, text=True),
         subprocess.Popen([sys.executable, "-c", late, node, marker], stdout=subprocess.PIPE,
                          text=True)]
started = [rank.stdout.readline() for rank in ranks]
def forward(signum, _frame):  # once to each rank, as torchrun's agent does
    open(marker, "a").write(f"{os.getpid()} launcher SIGINT\\n")
    [rank.send_signal(signum) for rank in ranks]
signal.signal(signal.SIGINT, forward)
print(f"ready {os.getpid()} rank {ranks[0].pid} {ranks[1].pid}", flush=True)
codes = [rank.wait() for rank in ranks]
"""


def test_a_rank_the_launcher_forwarded_to_before_it_held_a_node_gets_no_second_signal(
        make_config: Any, node: str, holders: Holders) -> None:
    """The rescan finds the second rank holding the node in its save: it was started before
    the forward, so it had the launcher's SIGINT; the guard's own would cut the save."""
    launcher = subprocess.Popen([sys.executable, "-c", LATE_OPENING_LAUNCHER, node, HOLDER,
                                 holders.marker], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, _rank, first, late = launcher.stdout.readline().split()
    config = make_config(drain={"rounds": 3, "launchers": [
        {"cmdline": "a late-opening launcher", "stop": "forward", "name": "late-launcher"}]})
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert launcher.wait(timeout=10) == 0
    assert sorted(holders.signals()) == sorted(
        [f"{pid} launcher SIGINT", f"{first} SIGINT", f"{late} SIGINT"]), holders.signals()
    [row] = [r for r in report.holders if r.decision.holder.pid == int(late)]
    assert row.outcome.kind == "exited" and row.outcome.signalled, row.outcome


def test_nor_from_the_next_attempt_when_it_opens_its_node_after_that_attempt_ended(
        make_config: Any, node: str, holders: Holders) -> None:
    """The first rank still saving vetoes the first attempt; the second opens the node only
    after it: the next attempt finds it, and tells by its start that the forward of the
    first attempt, which began later, reached it."""
    script = LATE_OPENING_LAUNCHER.replace(
        '"--delay", "0.1"]', '"--mode", "slow"]').replace(
        "time.sleep(1.5); sys.exit(0)", "time.sleep(1.5); f2 = open(sys.argv[1], 'rb'); "
                                        "time.sleep(30); sys.exit(0)").replace(
        "f = open(sys.argv[1], 'rb'); ", "")
    launcher = subprocess.Popen([sys.executable, "-c", script, node, HOLDER, holders.marker],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, _rank, first, late = launcher.stdout.readline().split()
    holders.extra_pids += [int(first), int(late)]
    config = make_config(drain={"timeout_s": 0.5, "launchers": [
        {"cmdline": "a late-opening launcher", "stop": "forward", "name": "late-launcher"}]})
    assert guard(config).verdict.kind == "veto"
    assert wait_for(lambda: any(os.path.realpath(f"/proc/{late}/fd/{fd}") == node
                                for fd in os.listdir(f"/proc/{late}/fd")), 10)
    second = guard(config)
    [row] = [r for r in second.holders if r.decision.holder.pid == int(late)]
    assert row.outcome.kind == "timeout", row.outcome
    assert sorted(holders.signals()) == sorted(
        [f"{pid} launcher SIGINT", f"{first} SIGINT", f"{late} SIGINT"]), holders.signals()


def test_a_worker_whose_parent_still_runs_is_not_said_left_behind(make_config: Any,
                                                                   node: str) -> None:
    """At the timeout the worker is still there because its parent is: its reason says
    so, and never advises killing the worker (which would break the parent's loop)."""
    proc = subprocess.Popen([sys.executable, "-c", SLOW_FAMILY, node], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        parent, child = map(int, proc.stdout.readline().split())
        report = guard(make_config(drain={"timeout_s": 1}))
        assert report.verdict.kind == "veto", report.verdict.texts
        (said,) = [t for t in report.verdict.texts if t.startswith(f"pid {child} ")]
        assert "left it behind" not in said and f"kill -TERM {child}" not in said, said
        assert f"pid {parent}" in said and "still running" in said, said
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ``accelerate launch train.py`` with its processes set by ``accelerate config``'s
# file, not on the command line: accelerate runs torchrun's agent in its own
# process, which starts the ranks and forwards SIGINT to each (written down).
FAKE_ACCELERATE = """
import os, signal, subprocess, sys
node, holder, marker, count = sys.argv[2:6]
ranks = [subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                           "--delay", "0.3"], stdout=subprocess.PIPE, text=True)
         for _ in range(int(count))]
def forward(signum, _frame):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} launcher SIGINT\\n")
    for rank in ranks:
        rank.send_signal(signum)
signal.signal(signal.SIGINT, forward)
print("ready", os.getpid(), *[r.stdout.readline().split()[1] for r in ranks], flush=True)
for rank in ranks:
    rank.wait()
"""


def test_accelerate_that_started_several_ranks_is_their_agent(
        make_config: Any, node: str, holders: Holders, tmp_path: Any) -> None:
    script = tmp_path / "accelerate"
    script.write_text(FAKE_ACCELERATE)
    launcher = subprocess.Popen([sys.executable, str(script), "launch", node, HOLDER,
                                 holders.marker, "2"], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, *ranks = launcher.stdout.readline().split()
    config = make_config()
    said = guard(config, dry_run=True)
    for rank in ranks:
        (rec,) = [r for r in said.holders if str(r.decision.holder.pid) == rank]
        assert f"from accelerate (pid {pid})" in rec.outcome.why, rec.outcome.why
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert launcher.wait(timeout=10) == 0
    # The agent gets the one signal and forwards it: one SIGINT to each, never two.
    assert sorted(holders.signals()) == sorted([f"{pid} launcher SIGINT"] +
                                               [f"{rank} SIGINT" for rank in ranks])


# A script that starts a job in a session of its own (setsid) and leaves, the job
# running on (reparented).
STARTER = """
import subprocess, sys
job = subprocess.Popen([sys.executable] + sys.argv[1:], stdout=subprocess.PIPE, text=True,
                       start_new_session=True)
print(job.stdout.readline().split()[1], flush=True)
sys.stdin.readline()
"""
# A torchrun of another job (it holds nothing yet): its SIGINTs are written down.
OTHER_TORCHRUN = """
import os, signal, sys, time
signal.signal(signal.SIGINT, lambda *_: open(sys.argv[1], "a").write(f"{os.getpid()} SIGINT\\n"))
print("ready", flush=True)
time.sleep(60)
"""


def test_a_launcher_that_took_over_the_parents_pid_is_not_the_jobs(
        node: str, holders: Holders, tmp_path: Any) -> None:
    """The holder's parent left after the scan and a torchrun of another job got its pid:
    that torchrun started after the holder, so it is no ancestor of it and never gets
    the holder's signal in its place."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, HOLDER, "--node", node,
                                "--marker", holders.marker], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    holders.procs.append(starter)
    assert starter.stdout is not None and starter.stdin is not None
    job = int(starter.stdout.readline())
    holders.extra_pids.append(job)
    inventory = take_inventory(DevicesConfig((), (node,), ()))
    (holder,) = [h for h in scan_holders(inventory).holders if h.pid == job]
    assert holder.ppid == starter.pid
    starter.stdin.write("\n")
    starter.stdin.close()
    starter.wait(timeout=10)
    script = tmp_path / "torchrun"
    script.write_text(OTHER_TORCHRUN)
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(starter.pid - 1))
    other = subprocess.Popen([sys.executable, str(script), holders.marker],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(other)
    assert other.stdout is not None and other.stdout.readline() == "ready\n"
    assert other.pid == holder.ppid
    p = plan([holder], ProcFS())
    assert p.role(holder) is None, p
    assert [h.pid for h in p.signalled()] == [job]


# A torchrun whose ranks are shells that run the holder (``--no_python``): as torch 1.13
# starts its ranks, or in a session of their own, as newer torch does (it then signals
# each rank's process group).
SHELL_RANKS = """
import subprocess, sys
node, holder, session = sys.argv[1], sys.argv[2], sys.argv[3] == "session"
shell = subprocess.Popen(["/bin/bash", "-c", f"{sys.executable} {holder} --node {node}; exit $?"],
                         stdout=subprocess.PIPE, text=True, start_new_session=session)
print(shell.stdout.readline().split()[1], flush=True)
shell.wait()
"""


@pytest.mark.parametrize(("session", "reached"), [("plain", False), ("session", True)])
def test_a_root_below_a_rank_is_signalled_where_the_forward_misses_it(
        node: str, holders: Holders, tmp_path: Any, session: str, reached: bool) -> None:
    script = tmp_path / "torchrun"
    script.write_text(SHELL_RANKS)
    launcher = subprocess.Popen([sys.executable, str(script), node, HOLDER, session],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    job = int(launcher.stdout.readline())
    holders.extra_pids.append(job)
    inventory = take_inventory(DevicesConfig((), (node,), ()))
    (holder,) = [h for h in scan_holders(inventory).holders if h.pid == job]
    p = plan([holder], ProcFS())
    found = p.role(holder)
    assert found is not None and found[1].launcher is not None
    assert found[1].launcher.pid == launcher.pid
    assert found[0] == ("forwarded" if reached else "beyond"), p
    assert [h.pid for h in p.signalled()] == ([] if reached else [job])



def test_a_stopped_launcher_whose_ranks_it_cannot_reach_gets_no_signal(
        make_config: Any, node: str, holders: Holders, tmp_path: Any) -> None:
    """torchrun, Ctrl-Z'd, its rank a shell running the holder (out of reach of its forward):
    the holder gets the guard's signal, the launcher none, which would stay pending and end
    the job whenever it is continued."""
    script = tmp_path / "torchrun"
    script.write_text(SHELL_RANKS)
    launcher = subprocess.Popen([sys.executable, str(script), node, HOLDER, "plain"],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    holders.extra_pids.append(int(launcher.stdout.readline()))
    launcher.send_signal(signal.SIGSTOP)
    status = Path(f"/proc/{launcher.pid}/status")
    assert wait_for(lambda: "\nState:\tT" in status.read_text(), 5)
    report = guard(make_config())
    assert report.verdict.kind == "allow", report.verdict.texts
    [pending] = [ln for ln in status.read_text().splitlines() if ln.startswith("ShdPnd:")]
    assert not int(pending.split()[1], 16) & (1 << (signal.SIGINT - 1)), pending
    launcher.kill()


# A launcher that forwards SIGINT to its one rank, which saves for longer than the drain waits.
FORWARDING_LAUNCHER = """# a forwarding launcher
import os, signal, subprocess, sys
node, holder, marker = sys.argv[1:4]
rank = subprocess.Popen([sys.executable, holder, "--node", node, "--marker", marker,
                         "--mode", "slow"], stdout=subprocess.PIPE, text=True)
rank.stdout.readline()
def forward(signum, _frame):
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} launcher SIGINT\\n")
    rank.send_signal(signum)
signal.signal(signal.SIGINT, forward)
print(f"ready {os.getpid()} rank {rank.pid}", flush=True)
rank.wait()
"""


def test_a_rank_whose_launcher_could_not_be_signalled_is_not_said_forwarded(
        make_config: Any, node: str, holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's pidfd cannot be had (the guard's fd table full): the rank gets SIGINT
    from the guard, and its timeout says so, naming the launcher left running."""
    launcher, pid, rank = _start_launcher(holders, FORWARDING_LAUNCHER, node)
    holders.extra_pids.append(int(rank))
    real_open = os.pidfd_open

    def full_for_the_launcher(target: int, flags: int = 0) -> int:
        if target == int(pid):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_open(target, flags)

    monkeypatch.setattr(os, "pidfd_open", full_for_the_launcher)
    config = make_config(drain={"timeout_s": 1, "launchers": [
        {"cmdline": "a forwarding launcher", "stop": "forward", "name": "fwd-launcher"}]})
    report = guard(config)
    assert report.verdict.kind == "veto"
    assert holders.signals() == [f"{rank} SIGINT"]  # from the guard; the launcher had none
    [reason] = [r for r in report.verdict.texts if r.startswith(f"pid {rank} ")]
    assert "forwarded" not in reason, reason
    assert (f"fwd-launcher (pid {pid}) could not be signalled, so the guard sent SIGINT to "
            f"this rank itself") in reason and f"kill -INT {pid}" in reason, reason
    assert launcher.poll() is None



@pytest.mark.parametrize("stop", ["forward", "hold"])
def test_a_launcher_its_user_stopped_is_never_signalled_nor_continued(
        make_config: Any, node: str, holders: Holders, stop: str) -> None:
    """Ctrl-Z'd, or under a debugger. Forward: its rank vetoes before anyone is signalled (a
    forward would stay pending and end the job when it is continued, after the veto). Hold:
    its rank is drained, and the launcher is left stopped as its user left it."""
    graceful = FORWARDING_LAUNCHER.replace('"--mode", "slow"', '"--mode", "graceful"')
    launcher, pid, rank = _start_launcher(holders, graceful, node)
    holders.extra_pids.append(int(rank))
    launcher.send_signal(signal.SIGSTOP)
    assert wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().split()[2] == "T", 5)
    config = make_config(drain={"launchers": [
        {"cmdline": "a forwarding launcher", "stop": stop, "name": "fwd-launcher"}]})
    report = guard(config)
    if stop == "forward":
        assert [r.code for r in report.verdict.reasons] == ["stopped"], report.verdict.texts
        [reason] = report.verdict.texts
        assert reason.startswith(f"pid {rank} python")
        assert (f"is a rank of fwd-launcher (pid {pid}), which is stopped (SIGSTOP, state T)"
                in reason and f"kill -CONT {pid}" in reason), reason
        assert holders.signals() == []
    else:
        assert report.verdict.kind == "allow", report.verdict.texts
        assert holders.signals() == [f"{rank} SIGINT"]
        assert (f"fwd-launcher (pid {pid}) was stopped already (state T): left stopped, not "
                "continued") in report.verdict.warnings
    assert Path(f"/proc/{pid}/stat").read_text().split()[2] == "T"
    launcher.send_signal(signal.SIGCONT)


def test_a_forwarding_launcher_that_ignores_sigint_is_said_so_and_its_rank_signalled(
        make_config: Any, node: str, holders: Holders) -> None:
    """Started with SIGINT ignored (`&` in a script): it can forward nothing, so its rank
    gets SIGINT from the guard, and check says so, not that the launcher forwards it."""
    deaf = FORWARDING_LAUNCHER.replace("signal.signal(signal.SIGINT, forward)",
                                       "signal.signal(signal.SIGINT, signal.SIG_IGN)")
    deaf = deaf.replace('"--mode", "slow"', '"--mode", "graceful"')
    launcher, pid, rank = _start_launcher(holders, deaf, node)
    holders.extra_pids.append(int(rank))
    config = make_config(drain={"launchers": [
        {"cmdline": "a forwarding launcher", "stop": "forward", "name": "fwd-launcher"}]})
    looked = guard(config, dry_run=True)
    [hr] = [h for h in looked.holders if h.decision.holder.pid == int(rank)]
    assert not any("the signal goes to the launcher" in n for n in hr.decision.notes), hr
    assert any(f"fwd-launcher (pid {pid}), which does not take the signal (it is ignored)" in n
               for n in hr.decision.notes), hr.decision.notes
    report = guard(config)
    assert report.verdict.kind == "allow", report.verdict.texts
    assert holders.signals() == [f"{rank} SIGINT"]
    assert any(f"fwd-launcher (pid {pid}) ignored SIGINT: its ranks get it from the guard" in w
               for w in report.verdict.warnings), report.verdict.warnings
    assert launcher.wait(timeout=10) == 0


# ``python -m torch.distributed.launch`` as torch 1.8 had it, before the elastic agent: it
# Popens its ranks (no TORCHELASTIC_RUN_ID in their environment), and on SIGINT or SIGTERM,
# or when a rank exits non-zero, SIGKILLs every rank. Every signal it takes and every
# SIGKILL it sends is written down.
LEGACY_LAUNCH = """
import os, signal, subprocess, sys, time
node, train, marker, out = sys.argv[1:5]
processes = []
for rank in range(2):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    processes.append(subprocess.Popen([sys.executable, train, node, marker, out], env=env,
                                      stdout=subprocess.PIPE, text=True))
def sigkill_handler(signum, _frame):
    with open(marker, "a") as m:
        if _frame is not None:
            m.write(f"{os.getpid()} launcher {signal.Signals(signum).name}\\n")
        for process in processes:
            m.write(f"{process.pid} SIGKILL\\n")
            process.kill()
    sys.exit(1)
signal.signal(signal.SIGINT, sigkill_handler)
signal.signal(signal.SIGTERM, sigkill_handler)
print("ready", os.getpid(), *[p.stdout.readline().split()[1] for p in processes], flush=True)
alive = set(processes)
while alive:
    for process in list(alive):
        if process.poll() is not None:
            if process.returncode != 0:
                sigkill_handler(signal.SIGTERM, None)
            alive.discard(process)
    time.sleep(0.1)
"""
# Its rank: holds the node; on SIGINT it writes that down, saves for a second, then writes
# its checkpoint and exits 0.
LEGACY_RANK = """
import os, sys, time
node, marker, out = sys.argv[1:4]
f = open(node, "rb")
try:
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    with open(marker, "a") as m:
        m.write(f"{os.getpid()} SIGINT\\n")
    time.sleep(1.0)
    with open(os.path.join(out, "ckpt-" + os.environ["RANK"]), "w") as c:
        c.write(str(os.getpid()))
"""


def test_torch_distributed_launch_before_the_elastic_agent_is_held_while_its_ranks_save(
        make_config: Any, node: str, holders: Holders, tmp_path: Any) -> None:
    """Its ranks' environment lacks TORCHELASTIC_RUN_ID: it is no torchrun agent and forwards
    nothing (it SIGKILLs its ranks). It is stopped, never signalled; each rank gets one
    SIGINT from the guard and saves; continued, the launcher sees them leave and exits."""
    package = tmp_path / "old-torch" / "torch" / "distributed"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "launch.py").write_text(LEGACY_LAUNCH)
    train = tmp_path / "train.py"
    train.write_text(LEGACY_RANK)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env["PYTHONPATH"] = str(tmp_path / "old-torch")
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.launch", node,
                                 str(train), holders.marker, str(out)], env=env,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    holders.procs.append(launcher)
    assert launcher.stdout is not None
    _ready, pid, *ranks = launcher.stdout.readline().split()
    config = make_config(drain={"timeout_s": 10})
    said = {str(r.decision.holder.pid): r.outcome.why for r in guard(config, dry_run=True).holders}
    report = guard(config)
    signals = holders.signals()
    # One SIGINT to each rank, from the guard; none to the launcher, and no SIGKILL.
    assert sorted(signals) == sorted(f"{rank} SIGINT" for rank in ranks), signals
    assert report.verdict.kind == "allow", report.verdict.texts
    assert launcher.wait(timeout=10) == 0
    assert sorted((out / f"ckpt-{r}").read_text() for r in range(2)) == sorted(ranks)
    for rank in ranks:
        assert f"torch.distributed.launch (pid {pid}) is stopped meanwhile" in said[rank], said


# A rank that saves on SIGINT, and its forked worker set to ignore SIGINT (so that Ctrl-C
# reaches the main process alone, as DataLoader and pool workers often are), holding the
# node it inherited; the worker leaves when its parent is gone.
IGNORING_WORKER = """
import os, signal, sys, time
node, out = open(sys.argv[1], "rb"), sys.argv[2]
r, w = os.pipe()
child = os.fork()
if child == 0:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.close(w)
    os.read(r, 1)  # the parent gone
    with open(os.path.join(out, "worker"), "w") as f:
        f.write("left with its parent")
    os._exit(0)
os.close(r)
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    time.sleep(0.3)  # the child's SIG_IGN set before the guard looks
    print(os.getpid(), child, flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    with open(os.path.join(out, "checkpoint"), "w") as f:
        f.write("saved")
"""


def test_a_worker_that_ignores_sigint_leaves_with_its_parent_and_vetoes_nothing(
        make_config: Any, node: str, tmp_path: Path) -> None:
    """It is never signalled, so its disposition does not matter: it vetoed every suspend
    while the job ran, and the advice was to SIGTERM it, which crashes the rank."""
    proc = subprocess.Popen([sys.executable, "-c", IGNORING_WORKER, node, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        parent, child = map(int, proc.stdout.readline().split())
        config = make_config()
        look = guard(config, dry_run=True)
        assert look.verdict.kind == "allow", look.verdict.texts
        report = guard(config)
        assert report.verdict.kind == "allow", report.verdict.texts
        outcomes = {h.holder.pid: h.outcome for h in report.holders}
        assert outcomes[parent].kind == outcomes[child].kind == "exited", outcomes
        assert "left with its parent" in outcomes[child].why
        assert proc.wait(timeout=5) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):  # the job gone: its group too
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (tmp_path / "checkpoint").read_text() == "saved"
    assert wait_for(lambda: (tmp_path / "worker").exists(), 5)


def _agent_rank(kind: str, wait_s: float) -> tuple[Decision, Plan, JobStop]:
    """A rank of a ``kind`` agent (torchrun's elastic agent, or accelerate's), the signal
    forwarded to it, and its wait of ``wait_s``."""
    rank = replace(holder(pid=11), ppid=10)
    agent = Launcher(10, 1, 1000, kind, kind, BUILTIN[kind], "caught")
    job = Job((rank,), launcher=agent)
    decision = Decision(rank, "drain", "holds a compute node", "SIGINT", wait_s)
    return decision, Plan((job,)), JobStop(quiet={holder_id(rank): "after the forward"})


@pytest.mark.parametrize("kind", ["torchrun", "accelerate"])
def test_an_agents_rank_still_saving_is_told_what_a_wait_can_do(kind: str) -> None:
    """The agent SIGKILLs its ranks 30 s after it forwarded: past 30 s no wait helps, but a
    wait cut short by the deadline (a later round) could still have saved it."""
    d, p, stop = _agent_rank(kind, 60.0)
    assert "a longer wait cannot save this rank" in timeout_remedy(d, p, stop, waited=60.0)
    cut = timeout_remedy(d, p, stop, waited=12.0)
    assert "a longer wait cannot" not in cut
    assert "a wait of 30 s at most can still save it" in cut, cut


def test_a_rank_the_agent_killed_at_its_30_s_is_said_to_have_lost_its_save() -> None:
    d, p, stop = _agent_rank("torchrun", 60.0)
    killed = {holder_id(d.holder): Outcome("exited", 30.01, "")}
    [line] = killed_by_agent([d], p, killed, stop)
    assert line == ("pid 11 python3 left 30.0 s after torchrun (pid 10) forwarded SIGINT, "
                    "when it SIGKILLs its ranks: its save was likely cut short")
    assert killed_by_agent([d], p, {holder_id(d.holder): Outcome("exited", 12.0, "")}, stop) == []
    # The guard's own signal, not the agent's forward (the agent ignores SIGINT, could not be
    # signalled, or forwarded in an earlier attempt): the agent never began its 30 s.
    assert killed_by_agent([d], p, killed, JobStop()) == []
    assert killed_by_agent([d], p, killed, stop, unforwarded={holder_id(d.holder)}) == []
    assert killed_by_agent([d], p, killed, replace(stop, earlier={holder_id(d.holder): 4})) == []
