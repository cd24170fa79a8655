"""A Jupyter kernel that ``drain``'s operator never confirmed is never asked to shut down.

With ``[drain] jupyter = "shutdown"`` an idle kernel (SIGINT ignored by design) becomes a
shutdown request, which ends it as a signal would: it is held to the confirmed list as a
signalled holder is. The kernel is real (helpers/kernels.py), the list as ``drain`` hands it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from helpers.holders import Holders
from helpers.kernels import Kernel
from helpers.runners import guard

from suspendguard.model import holder_id


def test_an_unconfirmed_idle_kernel_is_not_shut_down(kernel: Kernel, make_config: Any) -> None:
    report = guard(make_config(drain={"jupyter": "shutdown"}), confirmed=frozenset())
    assert report.verdict.kind == "veto", report.verdict.texts
    [held] = [hr for hr in report.holders if hr.decision.holder.pid == kernel.pid]
    assert held.decision.kind == "veto-unconfirmed", held.decision
    assert held.outcome.kind == "not-signalled", held.outcome
    assert "shutdown_request" not in held.outcome.why
    assert [r.code for r in report.verdict.reasons] == ["unconfirmed"], report.verdict.texts
    assert kernel.wait_exit(1.0) is None  # never asked: it still runs
    assert kernel.alive()


def test_a_kernel_left_off_the_list_leaves_the_confirmed_job_unsignalled(
        kernel: Kernel, make_config: Any, node: str, holders: Holders, tmp_path: Path) -> None:
    # The operator confirmed one job; the kernel, idle, was not on the list. The unconfirmed
    # kernel makes the veto certain before anyone is signalled: the job is not signalled either.
    job, pid = holders.start(node)
    confirmed = {holder_id(hr.decision.holder) for hr in guard(
        make_config(drain={"jupyter": "shutdown"}), dry_run=True, record=False).holders
        if hr.decision.holder.pid == pid}
    assert len(confirmed) == 1
    report = guard(make_config(drain={"jupyter": "shutdown"}), confirmed=confirmed)
    kinds = {hr.decision.holder.pid: hr.decision.kind for hr in report.holders}
    assert kinds[kernel.pid] == "veto-unconfirmed", kinds
    assert report.verdict.kind == "veto", report.verdict.texts
    time.sleep(0.5)  # a SIGINT, had one been sent, is handled within the holder's delay
    assert holders.signals() == [] and job.poll() is None
    assert kernel.alive()
