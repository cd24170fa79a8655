"""The test suite's own helpers: a pytest plugin (plugin.py) and what it builds on."""

from pathlib import Path

# Recorded real tool output and log lines.
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
