"""The test suite's own helpers: a pytest plugin (plugin.py) and what it builds on."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
# Recorded real tool output and log lines; fakes of what this machine lacks.
FIXTURES = TESTS / "fixtures"
FAKES = TESTS / "fakes"
