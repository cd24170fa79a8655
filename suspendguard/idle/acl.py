"""The pyACL backend: the CANN toolkit's ``acl`` module, asked by a child.

The module is the ``acl`` that the CANN toolkit's set_env.sh puts on the
path, never the unrelated PyPI package named ``pyacl``. It is imported only
in a child process (idle/acl_probe.py), for two reasons: initialising pyACL
registers the caller with the device runtime, which the guard must never do
to itself; and a runtime that hangs or crashes takes only the child with it,
which the runner kills at the timeout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from suspendguard.config import IDLE_BACKENDS, IdleConfig
from suspendguard.idle.base import Backend, DeviceReading, QueryFailed, find_file
from suspendguard.system import runner

DEFAULT_ENV_SCRIPTS = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/cann/set_env.sh",
    "/usr/local/Ascend/nnrt/set_env.sh",
)

# The child sources set_env.sh with no arguments (some CANN scripts parse
# theirs) from / (so no acl.py in the guard's working directory can shadow
# the toolkit's), then replaces itself with the probe.
CHILD_SCRIPT = (
    'cd / || exit 111; env_file="$SUSPENDGUARD_ACL_ENV"; set --; '
    '. "$env_file" >/dev/null 2>&1; '
    'exec "$SUSPENDGUARD_PYTHON" -m suspendguard.idle.acl_probe'
)

# The directory holding the suspendguard package, so the child imports the
# same code even when the guard runs from a checkout.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
# What narrows the devices a process of the CANN runtime sees (a container's, a job's).
VISIBLE_DEVICES = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")


class RuntimeFailed(QueryFailed):
    """pyACL was there and failed: acl.init() or the device count returned an error, or the
    child died of a signal, exited with an error or did not answer in time. Not a missing
    CANN (``acl`` that cannot be imported), a child that could not start, nor the guard's
    own stop, which say nothing of the device."""


class AclBackend(Backend):
    declared = IDLE_BACKENDS["acl"]

    def __init__(self, config: IdleConfig) -> None:
        super().__init__(config)
        self.ascend_env = config.ascend_env

    def env_script(self) -> tuple[str | None, str]:
        """(the set_env.sh to source, why none) from [idle] ascend_env or the defaults."""
        return find_file(self.ascend_env, DEFAULT_ENV_SCRIPTS, "ascend_env",
                         "no CANN set_env.sh found")

    def probe(self) -> tuple[bool, str]:
        script, why = self.env_script()
        if script is None:
            return False, why
        return True, script

    def query(self, timeout_s: float) -> list[DeviceReading]:
        return [self._device(entry) for entry in self._child(timeout_s, "read")]

    def open_devices(self, timeout_s: float) -> list[tuple[int, int]]:
        """(device, aclrtSetDevice's answer) for each device: the health check after resume."""
        return [(int(e.get("device", -1)), int(e.get("ret", -1)))
                for e in self._child(timeout_s, "open")]

    def _child(self, timeout_s: float, mode: str) -> list[dict[str, Any]]:
        script, why = self.env_script()
        if script is None:
            raise QueryFailed(why)
        # Every device of the host: a job's view (its visible devices) would hide the others.
        env = {k: v for k, v in os.environ.items() if k not in VISIBLE_DEVICES}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
        )
        env["SUSPENDGUARD_ACL_ENV"] = script
        env["SUSPENDGUARD_PYTHON"] = sys.executable
        env["SUSPENDGUARD_ACL_MODE"] = mode
        result = runner.run(["bash", "-c", CHILD_SCRIPT], timeout=timeout_s, env=env,
                            name="pyACL probe")
        if not result.ok:
            # result.error: it did not start, or the guard was stopped; anything else is the
            # child's end: killed at the timeout, by a signal, or a failing exit.
            failed = QueryFailed if result.error else RuntimeFailed
            raise failed(f"pyACL probe: {_failure(result)}")
        answer = parse_probe_output(result.stdout)
        if "error" in answer:
            failed = QueryFailed if answer.get("unavailable") else RuntimeFailed
            raise failed(f"pyACL probe: {answer['error']}")
        devices: list[dict[str, Any]] = answer.get("devices", [])
        return devices

    def _device(self, entry: dict[str, Any]) -> DeviceReading:
        ident = f"device {entry.get('device')}"
        ret = entry.get("ret", 0)
        keys = ("cube_pct", "vector_pct", "aicpu_pct", "memory_pct")
        readings: dict[str, float | None] = {}
        for key in keys:
            value = entry.get(key)
            readings[key] = float(value) if isinstance(value, (int, float)) else None
        reason = f"acl.rt.get_device_utilization_rate returned {ret}" if ret != 0 else ""
        return self.reading(ident, readings, (), reason)


def _failure(result: runner.RunResult) -> str:
    text = result.describe_failure()
    # argv[0] is bash; say what bash was running instead
    return text[len("bash: "):] if text.startswith("bash: ") else text


def parse_probe_output(stdout: str, what: str = "pyACL probe") -> dict[str, Any]:
    """A probe child's JSON line (the last one; set_env.sh or pyACL may print before it)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                break
            if isinstance(value, dict):
                return value
            break
    tail = stdout.strip().splitlines()[-1][:200] if stdout.strip() else "nothing"
    raise QueryFailed(f"{what}: no JSON answer (printed {tail!r})")
