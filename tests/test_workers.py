"""Forked workers: results in order, and a failed worker's share done in-process."""

from __future__ import annotations

import os
import threading

from suspendguard.workers import can_fork, run_shares


def test_results_come_back_in_order_from_forked_workers() -> None:
    parent = os.getpid()
    pids: list[int] = []

    def work(share: list[int]) -> list[int]:
        return [x * x for x in share]

    def to_wire(result: list[int]) -> list[int]:
        return [*result, os.getpid()]  # the worker says who it was

    def from_wire(wire: list[int]) -> list[int]:
        pids.append(wire[-1])
        return wire[:-1]

    assert can_fork()
    out = run_shares([[1, 2], [3], [4, 5, 6]], work, to_wire, from_wire)
    assert out == [[1, 4], [9], [16, 25, 36]]
    assert len(pids) == 2 and parent not in pids  # two shares really ran elsewhere


def test_a_failing_worker_share_is_done_here() -> None:
    parent = os.getpid()

    def work(share: list[int]) -> int:
        if os.getpid() != parent:
            raise RuntimeError("this worker breaks")
        return sum(share)

    assert run_shares([[1], [2, 3], [4]], work, lambda r: r, lambda w: int(w)) == [1, 5, 4]


def test_no_fork_from_a_threaded_process() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        parent = os.getpid()
        seen: list[int] = []

        def work(share: list[int]) -> int:
            seen.append(os.getpid())
            return len(share)

        assert run_shares([[1], [2]], work, lambda r: r, lambda w: int(w)) == [1, 1]
        assert seen == [parent, parent]
    finally:
        stop.set()
        t.join()
