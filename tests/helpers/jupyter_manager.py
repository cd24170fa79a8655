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
  reaches it. The command is done once the cell started, not when it ends.

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


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


manager = KernelManager(connection_file=sys.argv[1])
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
