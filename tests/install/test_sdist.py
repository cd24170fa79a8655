"""The source distribution carries what setup.py copies into the package: a wheel built
from it (pip install from an sdist, python -m build) needs systemd/, man/ and completion/."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from helpers import REPO

DATA = ("systemd", "man", "completion")


def test_the_sdist_holds_the_folders_the_wheel_is_built_with(tmp_path: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout.decode().split("\0")
    tree = tmp_path / "tree"  # a copy: the build writes its egg-info beside the sources
    for name in filter(None, tracked):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tree / name)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                   cwd=tree, capture_output=True, check=True, timeout=300)
    [sdist] = (tmp_path / "dist").iterdir()
    with tarfile.open(sdist) as tar:
        shipped = {Path(*Path(m.name).parts[1:]).as_posix() for m in tar.getmembers()
                   if m.isfile()}
    wanted = {n for n in tracked if n.split("/", 1)[0] in DATA}
    assert wanted and wanted <= shipped, sorted(wanted - shipped)
