"""A jupyter_client kernel manager, as a notebook server runs one: it starts a real ipykernel kernel.

Run by the system python3 (which has ipykernel and jupyter_client; the
guard's venv has neither). The kernel runs in its own session with a
connection file jupyter_client writes, as under a Jupyter server. Prints
one JSON line per event on stdout:

- {"ready": PID, "connection_file": PATH} once the kernel answers;
- {"done": COMMAND} after each command from stdin;
- {"exited": STATUS} when the kernel process ends (a negative status: a signal).

Commands, one per stdin line:

- ``hold NODE``: the kernel opens NODE and keeps it open (a cell that runs to its end);
- ``busy PROGRESS STEPS``: the kernel starts a cell that appends one line per
  0.1 s step to PROGRESS, then ``done``; ``interrupted`` if a KeyboardInterrupt
  reaches it. The command is done once the cell started, not when it ends;
- ``fork MARK``: the kernel starts a daemonic multiprocessing child (forked,
  so it inherits the held node, as a DataLoader worker does) that writes its
  pid to MARK.pid and ``interrupted`` to MARK if a KeyboardInterrupt reaches it.
  A thread joins it: ipykernel 6.17's shutdown SIGTERMs its children and waits
  about 29 s for one left a zombie.

- ``spawn SCRIPT ARGS...``: a cell starts ``SCRIPT ARGS...`` with subprocess, in the
  kernel's process group (as ``subprocess.Popen`` does by default), waits for its first
  line, and a thread reaps it when it ends (helpers/cell_job.py).

At the end of stdin the manager ends its kernel if it still runs.
"""

import json
import sys
import threading
import time

from jupyter_client import KernelManager

BUSY_CELL = """\
import time
try:
    for step in range({steps}):
        with open({progress!r}, "a") as f:
            f.write(f"{{step}}\\n")
        time.sleep(0.1)
except KeyboardInterrupt:
    with open({progress!r}, "a") as f:
        f.write("interrupted\\n")
    raise
with open({progress!r}, "a") as f:
    f.write("done\\n")
"""

FORK_CELL = """\
import multiprocessing, os, threading, time
def _child(mark):
    with open(mark + ".pid", "w") as f:
        f.write(str(os.getpid()))
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        with open(mark, "w") as f:
            f.write("interrupted\\n")
_forked = multiprocessing.get_context("fork").Process(target=_child, args=({mark!r},), daemon=True)
_forked.start()
threading.Thread(target=_forked.join, daemon=True).start()
"""

SPAWN_CELL = """\
import subprocess, sys, threading
_job = subprocess.Popen([sys.executable, *{argv!r}], stdout=subprocess.PIPE, text=True)
_job.stdout.readline()
threading.Thread(target=_job.wait, daemon=True).start()
"""


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


# A kernel spec's name (argv[2]) to start instead of the default one's ipykernel_launcher.
manager = (KernelManager(connection_file=sys.argv[1], kernel_name=sys.argv[2])
           if len(sys.argv) > 2 else KernelManager(connection_file=sys.argv[1]))
manager.start_kernel(stdout=sys.stderr, stderr=sys.stderr)
client = manager.client()
client.start_channels()
client.wait_for_ready(timeout=60)
kernel = manager.provisioner.process  # the Popen of the kernel
say(ready=kernel.pid, connection_file=manager.connection_file)
threading.Thread(target=lambda: say(exited=kernel.wait()), daemon=True).start()

for line in sys.stdin:
    command, *args = line.split()
    if command == "hold":
        reply = client.execute(f"_held_node = open({args[0]!r}, 'rb')", reply=True, timeout=30)
        assert reply["content"]["status"] == "ok", reply["content"]
    elif command == "fork":
        reply = client.execute(FORK_CELL.format(mark=args[0]), reply=True, timeout=30)
        assert reply["content"]["status"] == "ok", reply["content"]
    elif command == "spawn":
        reply = client.execute(SPAWN_CELL.format(argv=args), reply=True, timeout=30)
        assert reply["content"]["status"] == "ok", reply["content"]
    elif command == "busy":
        client.execute(BUSY_CELL.format(progress=args[0], steps=int(args[1])))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(args[0]) as f:
                    if f.read():
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.02)
    say(done=command)

client.stop_channels()
if kernel.poll() is None:
    manager.shutdown_kernel(now=True)
