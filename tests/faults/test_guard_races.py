"""Issue 15 items 2, 3, 4: races around who holds the node, and who may signal it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import needs_root

HERE = Path(__file__).resolve().parent


def scene(script: str, *args: str) -> dict[str, object]:
    """Run a scene as PID 1 of a PID namespace (and /proc) of its own; its JSON line."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
         sys.executable, str(HERE / script), *args],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


# -- item 3: a recycled PID never gets the signal ------------------------------

@needs_root
def test_a_pid_taken_over_mid_scan_is_not_signalled(node: str, tmp_path: Path) -> None:
    result = scene("scene_pid_reuse.py", node, str(tmp_path / "marks"))
    assert result["marks"] == [], result
    assert result["holders"] == [], result  # the holder was gone; the innocent holds nothing
    assert result["verdict"] == "allow"
