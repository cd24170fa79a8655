"""An installed copy of the package for start-up measurements.

Start-up is measured as an installed package runs: a fresh virtual
environment (no .pth hooks, no editable-install finder) holding a copy of
suspendguard/ with its bytecode compiled, as pip leaves it. Its
dependencies (dbus-next, prometheus-client) come from the running environment,
through one path line: the copied package is found first.
"""

from __future__ import annotations

import compileall
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def installed_python() -> str:
    base = Path(tempfile.mkdtemp(prefix="sg-installed-"))
    python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([python, "-m", "venv", "--without-pip", str(base)], check=True)
    purelib = subprocess.run(
        [str(base / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    target = Path(purelib) / "suspendguard"
    shutil.copytree(REPO / "suspendguard", target,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "systemd", target / "data" / "systemd")
    compileall.compile_dir(str(target), quiet=1, force=True)
    deps = sorted({str(Path(_origin(name)).parent.parent) for name in ("dbus_next", "prometheus_client")})
    (Path(purelib) / "suspendguard-deps.pth").write_text("\n".join(deps) + "\n")
    return str(base / "bin" / "python")


def _origin(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"benchmarks: {module} is not installed here (pip install -e .)")
    return spec.origin
