"""The two ways a test runs the guard in-process: the CLI, and the pipeline itself."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suspendguard.cli import main
from suspendguard.guard.pipeline import run
from suspendguard.guard.report import Report
from suspendguard.store.history import History
from suspendguard.system.log import Logger


def cli(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``suspendguard ARGV`` in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, environ=environ or {})
    return code, out.getvalue(), err.getvalue()


def config_cli(path: Path, text: str) -> tuple[int, str, str]:
    """``suspendguard --config PATH config`` with ``text`` written at ``path`` first."""
    path.write_text(text)
    return cli("--config", str(path), "config")


def staged(tmp_path: Path) -> Path:
    """The guard installed into ``tmp_path``/stage, as ``install --root`` lays it out."""
    stage = tmp_path / "stage"
    code, out, err = cli("install", "--root", str(stage))
    assert code == 0, out + err
    return stage


def guard(config: Any, dry_run: bool = False, *, action: str | None = "suspend",
          origin: str = "test", idle_check: Any = None, **kw: Any) -> Report:
    """One run of the pipeline, its log lines dropped (unless ``log`` is given); recorded in the
    state folder's history."""
    kw.setdefault("history", History.open)
    kw.setdefault("log", Logger(io.StringIO(), {}))
    return run(config, dry_run=dry_run, action=action, origin=origin, idle_check=idle_check, **kw)


def quick_veto(run_guard: Callable[[], Report], within: float) -> Report:
    """``run_guard()``'s report: a veto, given within ``within`` seconds."""
    start = time.monotonic()
    report = run_guard()
    assert time.monotonic() - start < within
    assert report.verdict.kind == "veto"
    return report


__all__: Sequence[str] = ("cli", "guard", "quick_veto")
