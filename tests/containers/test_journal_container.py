"""A job's own console output, read from a real journal: systemd booted in a container.

Ascend jobs print most of their failures on stdout/stderr, which systemd
puts in the unit's journal. Here transient units (systemd-run) inside the
container print real-world failure lines (tests/fixtures/ascend-logs/
real-world-wordings.log) and journald stores them; ``suspendguard logs
--unit`` and the sleep hook's after-resume step read them back with the
container's own journalctl. See tests/systemd_harness.py for the container.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from helpers.systemd_harness import Boot, Container, container_marks, guard_config

pytestmark = container_marks()

NODE = "/dev/suspendguard-test/accel0"
# 1:8, as in test_systemd_container.py: a node the container's device policy
# lets a job open, that nothing else in the container holds.
NODE_RDEV = "1 8"
LOG_DIR = "/var/log/suspendguard-test"
STATE_DIR = "/var/lib/suspendguard-test-state"
CONFIG = guard_config(NODE, state_dir=STATE_DIR, log_dir=LOG_DIR)
HCCP = ("EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. "
        "Reason: Maybe the last training process is running.")
SOLUTION = "        Solution: Wait for 10s after killing the last training process and try again."
HEARTBEAT = ("rtDeviceSynchronizeWithTimeout execution failed, reason=lost heartbeat"
             "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:65]")
# Holds the node; when SIGINT stops it mid-run it prints, on stderr, what a
# job interrupted in a device synchronisation prints.
INTERRUPTED_JOB = f"""\
import sys, time
node = open({NODE!r}, "rb")
print("ready", flush=True)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    print({HEARTBEAT!r}, file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def box(boot: Boot) -> Iterator[Container]:
    container = boot(NODE, NODE_RDEV, LOG_DIR, unheld="/dev/random")
    container.write("/etc/suspendguard/config.toml", CONFIG)
    yield container
    container.stop_jobs()


def print_job(box: Container, unit: str, script: str) -> None:
    """A transient unit that prints ``script``'s output and exits, once journald has it all."""
    box.write(f"/run/{unit}.sh", script, 0o755)
    cursor = box.cursor()
    box.jobs.append(unit)
    box.run("systemd-run", f"--unit={unit}", "--service-type=exec", "--", f"/run/{unit}.sh")
    box.wait_journal(cursor, r"\bjob done\b", args=("-u", unit, "-o", "cat"))


def logs(box: Container, *args: str) -> dict[str, Any]:
    """``logs --json``; its exit status is grep's: 1 with findings, 0 without."""
    result = box.suspendguard("logs", LOG_DIR, "--json", *args, check=False)
    doc: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == (1 if doc["findings"] else 0), result.stderr
    return doc


def test_logs_unit_finds_the_jobs_own_failure(box: Container) -> None:
    since = datetime.fromtimestamp(float(box.run("date", "+%s.%N").stdout)) - timedelta(seconds=1)
    print_job(box, "sg-hccp.service", "#!/bin/sh\n"
              "echo 'Start training on device 0'\n"
              f"cat <<'EOF'\n{HCCP}\n{SOLUTION}\nEOF\n"
              "echo 'job done'\n")
    doc = logs(box, "--unit", "sg-hccp", "--since", since.isoformat())
    [journal] = doc["journals"]
    assert journal["unit"] == "sg-hccp.service" and journal["available"], journal
    assert journal["entries_read"] == 4, journal
    [finding] = doc["findings"]
    assert finding["rule"] == "device-held-by-previous-job"
    assert (finding["unit"], finding["file"]) == ("sg-hccp.service", "journal:sg-hccp.service")
    assert finding["text"] == f"{HCCP}\n{SOLUTION}"  # one entry, as the job printed it
    assert datetime.fromisoformat(finding["time"]) >= since
    result = box.suspendguard("logs", LOG_DIR, "--unit", "sg-hccp.service", check=False)
    assert result.returncode == 1, result.stderr
    human = result.stdout
    assert "Read the journal of sg-hccp.service: 4 entries." in human
    assert "device-held-by-previous-job (error): 1 line(s)" in human
    assert "e.g. journal:sg-hccp.service:2: EJ0001" in human


def test_logs_unit_reads_only_since(box: Container) -> None:
    """Later than the job's lines: nothing of them; a unit with no journal at all: 0 entries."""
    later = datetime.fromtimestamp(float(box.run("date", "+%s.%N").stdout)) + timedelta(seconds=1)
    doc = logs(box, "--unit", "sg-hccp.service", "--unit", "sg-never-ran.service",
               "--since", later.isoformat())
    assert [(j["unit"], j["available"], j["entries_read"]) for j in doc["journals"]] == [
        ("sg-hccp.service", True, 0), ("sg-never-ran.service", True, 0)]
    assert doc["findings"] == []


def test_after_resume_reads_the_drained_jobs_journal(box: Container) -> None:
    box.suspendguard("install", "--force")
    try:
        unit = "sg-interrupted.service"
        box.write(f"/run/{unit}.py", INTERRUPTED_JOB)
        pid = box.start_job(unit, [sys.executable, f"/run/{unit}.py"])
        journal = box.suspend()
        assert "Finished suspendguard@suspend.service" in journal, journal
        out = box.suspendguard("history", "--json", "-n", "1").stdout
        [attempt] = json.loads(out)["attempts"]
        assert attempt["verdict"] == "allow", attempt
        assert [(h["pid"], h["unit"], h["outcome"]["kind"]) for h in attempt["holders"]] == [
            (pid, unit, "exited")], attempt["holders"]
        found = [(f["rule"], f["file"]) for f in attempt["findings"]]
        assert found == [("heartbeat-lost", f"journal:{unit}")], attempt
        [text] = [f["text"] for f in attempt["findings"]]
        assert text == HEARTBEAT
        assert "post" in [e["phase"] for e in attempt["events"]]
        # the post step's journal line says where it was seen
        assert (f"suspend attempt {attempt['id']}: {unit}'s output reported 'lost heartbeat' "
                "(heartbeat-lost)") in journal, journal
    finally:
        box.suspendguard("uninstall", "--purge", check=False)
        box.reset_power()
