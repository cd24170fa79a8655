"""The framework tests' shared fixtures: the guard's config on the test node, and the jobs started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.frameworks import Job


@pytest.fixture
def job_config(tmp_path: Path, node: str) -> Path:
    """The test node only, no idle backends, a wait long enough for a job's checkpoint."""
    path = tmp_path / "config.toml"
    path.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n'
                    '[idle]\nbackends = []\n[drain]\ntimeout_s = 25\n')
    (tmp_path / "state").mkdir(mode=0o700)
    return path


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    """The jobs a test starts, each ended (killed whole) when it ends."""
    started: list[Job] = []
    yield started
    for job in started:
        job.end()
