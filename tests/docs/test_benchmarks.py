"""The benchmarks run on demand, never in the suite: each must at least start, its imports
from the package and from the tests' helpers found (a renamed helper broke one unseen)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if "__main__" in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_starts(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]


def test_every_benchmark_module_is_found() -> None:
    assert "faults.py" in SCRIPTS and len(SCRIPTS) >= 10, SCRIPTS
