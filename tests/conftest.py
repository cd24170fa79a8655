"""The suite's entry: the plugin with every shared fixture, and the isolation check."""

from __future__ import annotations

import pytest
from helpers.isolation import isolation_problem

pytest_plugins = ["helpers.plugin"]


def pytest_configure(config: pytest.Config) -> None:
    problem = isolation_problem()
    if problem is not None:
        pytest.exit(f"run the suite through tools/test: as root the tests need a private PID "
                    f"namespace, so that a guard under test can signal only what they started "
                    f"({problem})", returncode=pytest.ExitCode.USAGE_ERROR)
