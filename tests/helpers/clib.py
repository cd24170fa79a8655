"""Fake vendor libraries built from C in the tests, with the real C signatures."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def build_shared(source: Path, folder: Path, name: str) -> Path:
    """``source`` compiled into ``folder/name``; the test is skipped without a C compiler."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip(f"no C compiler (gcc) to build the fake {name}")
    out = folder / name
    subprocess.run([gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(out), str(source)],
                   check=True)
    return out
