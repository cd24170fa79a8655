"""Ship the top-level systemd/, man/ and completion/ folders inside the package as suspendguard/data/.

The unit and hook templates, the man pages and the shell completion live at
the top of the repository (where an operator and a packager look for them);
`suspendguard install` needs them from an installed wheel too. Everything
else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        for folder in ("systemd", "man", "completion"):
            target = Path(self.build_lib) / "suspendguard" / "data" / folder
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(Path(__file__).parent / folder, target)


setup(cmdclass={"build_py": BuildWithData})
