"""Ship the top-level systemd/ folder inside the package as suspendguard/data/systemd.

The unit and hook templates live at the top of the repository (where an
operator looks for them); `suspendguard install` needs them from an installed
wheel too. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithUnits(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "suspendguard" / "data" / "systemd"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(__file__).parent / "systemd", target)


setup(cmdclass={"build_py": BuildWithUnits})
