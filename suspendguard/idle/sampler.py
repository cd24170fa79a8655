"""Sample every device through the backends until each reads idle, busy or unknown.

Utilization figures are averages over a sampling window, so they lag a
job's exit (docs/how-it-decides.md has the measurement). A device is
therefore idle only after ``samples`` consecutive readings at or under
``busy_threshold``, and busy only if it still reads above it once
``settle_s`` has passed. The backends are arguments, so tests hand in real
tools, fakes or stand-ins.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from suspendguard.config import FAMILIES, IdleConfig
from suspendguard.idle.acl import AclBackend
from suspendguard.idle.base import (
    Backend,
    BackendStatus,
    DeviceProcess,
    DeviceReading,
    DeviceState,
    IdleReport,
    QueryFailed,
    ReportState,
    judge,
)
from suspendguard.idle.dcmi import DcmiBackend
from suspendguard.idle.npusmi import NpuSmiBackend
from suspendguard.idle.nvidiasmi import NvidiaSmiBackend
from suspendguard.idle.nvml import NvmlBackend
from suspendguard.system.deadline import Deadline

# The implementations of config.IDLE_BACKENDS: each class names its entry
# there, which gives it its name and family.
BACKEND_TYPES: dict[str, type[Backend]] = {
    backend.name: backend
    for backend in (AclBackend, NpuSmiBackend, DcmiBackend, NvmlBackend, NvidiaSmiBackend)
}


def make_backends(config: IdleConfig) -> list[Backend]:
    """The backends named in ``[idle] backends``, in that order, each reading its own keys."""
    return [BACKEND_TYPES[name](config) for name in config.backends if name in BACKEND_TYPES]


@dataclasses.dataclass
class _Track:
    """One device as one backend sees it over the run."""

    latest: DeviceReading
    idle_run: int = 0
    busy: DeviceReading | None = None  # the last reading above the threshold
    decided: DeviceState | None = None
    why: str = ""
    processes: dict[int, DeviceProcess] = dataclasses.field(default_factory=dict)

    def report(self) -> DeviceReading:
        shown = self.busy if self.decided == "busy" and self.busy else self.latest
        return dataclasses.replace(
            shown, state=self.decided or "unknown", reason=self.why or shown.reason,
            processes=tuple(self.processes.values()),
        )


def _said_by(name: str, reason: str) -> str:
    return reason if reason.startswith(f"{name}:") else f"{name}: {reason}"


def _pct(value: float) -> str:
    return f"{value:g}%"


def check_idle(
    config: IdleConfig,
    families: Sequence[str],
    deadline: Deadline,
    *,
    backends: Sequence[Backend] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IdleReport:
    """Sample every device of ``families`` until each is idle, busy or unknown.

    ``families`` names the family of each device found, once per device: a
    backend that reports fewer devices than that cannot call its family idle
    (a device it does not list may be the busy one).
    ``deadline`` is the run's: the whole step finishes by it, on its clock,
    each query gets at most what is left of it, and sampling stops when the
    guard is cancelled. ``backends`` defaults to those in
    ``[idle] backends``; only those of a family in ``families`` (the families
    whose nodes were found) that probe OK are asked.
    """
    # Only families a backend can ask; nodes of other families ("extra"
    # globs) are covered by the /proc scan alone.
    wanted = tuple(dict.fromkeys(f for f in families if f in FAMILIES))
    if not wanted:
        return IdleReport("none", (), (), (), ("no accelerator found",))
    candidates = make_backends(config) if backends is None else list(backends)
    statuses, used = _probe(candidates, wanted)
    start = deadline.clock()
    tracks, failed, unasked = _sample(config, used, start, deadline, sleep)
    _close(tracks, failed, config.samples, deadline.clock() - start)
    for name, why in failed.items():
        statuses[name] = BackendStatus(name, False, why)
    families_of = {b.name: b.family for b in candidates}
    report = _verdict(config, Counter(f for f in families if f in FAMILIES), families_of,
                      used, tracks, failed, tuple(statuses.values()))
    return dataclasses.replace(report, unasked=unasked)


def _probe(candidates: Sequence[Backend], wanted: tuple[str, ...],
           ) -> tuple[dict[str, BackendStatus], list[Backend]]:
    """Each candidate's status, and those to ask: of a wanted family, probing OK."""
    statuses: dict[str, BackendStatus] = {}
    active: list[Backend] = []
    # Primaries first, so a fallback knows whether one of its family is usable.
    for backend in sorted(candidates, key=lambda b: b.fallback):
        if backend.family not in wanted:
            statuses[backend.name] = BackendStatus(
                backend.name, False, f"not needed: no {backend.family} device found")
            continue
        primary = next((b for b in active if b.family == backend.family), None)
        if backend.fallback and primary is not None:
            statuses[backend.name] = BackendStatus(
                backend.name, False, f"not needed: {primary.name} answers for {backend.family}")
            continue
        try:
            ok, why = backend.probe()
        except Exception as exc:  # a probe must not crash the guard
            ok, why = False, f"probe failed: {type(exc).__name__}: {exc}"
        statuses[backend.name] = BackendStatus(backend.name, ok, why)
        if ok:
            active.append(backend)
    return statuses, active


Tracks = dict[tuple[str, str], _Track]  # (backend name, device id) -> what it saw


def _sample(
    config: IdleConfig,
    backends: Sequence[Backend],
    start: float,
    deadline: Deadline,
    sleep: Callable[[float], None],
) -> tuple[Tracks, dict[str, str], tuple[str, ...]]:
    """Ask ``backends`` in turn until each has decided its devices, or the deadline.

    Returns every device's track; for each backend that stopped answering
    (or never answered), why; and the backends the deadline came before
    they were asked at all, or that it left too little time to answer.
    """
    settle_end = start + config.settle_s
    interval = config.interval_ms / 1000.0
    # The time the first backend asked gets. One given less than half of it, that ran out of
    # it, lost more to the backends asked before it than it had: its timeout says nothing of
    # it (it was not asked, in effect). One that had most of it and hung has answered.
    full = min(config.command_timeout_s, deadline.left())
    tracks: Tracks = {}
    failed: dict[str, str] = {}
    answered: set[str] = set()
    cut: list[str] = []
    active = list(backends)
    clock = deadline.clock
    while active and deadline.left() > 0 and not deadline.cancelled:
        for backend in list(active):
            left = deadline.left()
            if left <= 0 or deadline.cancelled:
                break
            given = min(config.command_timeout_s, left)
            # Before the query: a process it lists started by then (DeviceProcess.listed_at).
            asked_at = time.clock_gettime(time.CLOCK_BOOTTIME)
            readings, why = _ask(backend, given)
            if why:
                active.remove(backend)
                if backend.name not in answered and given < full / 2 and deadline.left() <= 0:
                    cut.append(backend.name)
                    why += (f" (it had {given:.1f} s of [idle] command_timeout_s = "
                            f"{config.command_timeout_s:g} s: the backends asked before it took the rest)")
                failed[backend.name] = why
                continue
            answered.add(backend.name)
            if _take(tracks, backend.name, readings, asked_at, clock() >= settle_end, config):
                active.remove(backend)  # nothing left for it to settle
        if active:
            pause = min(interval, deadline.left())
            if pause > 0:
                sleep(pause)
    unasked = tuple(b.name for b in active if b.name not in answered)
    for name in unasked:
        failed[name] = f"{name}: " + (
            f"no answer: {deadline.cancel_reason}" if deadline.cancelled
            else "no answer before the deadline")
    return tracks, failed, (*cut, *unasked)


def _ask(backend: Backend, timeout_s: float) -> tuple[list[DeviceReading], str]:
    """(its readings, "") or ([], why it failed): a backend's failure is an unknown, not a crash."""
    try:
        readings = backend.query(timeout_s)
        if not readings:
            raise QueryFailed("reported no device")
    except QueryFailed as exc:
        return [], _said_by(backend.name, str(exc))
    except Exception as exc:  # a backend bug
        return [], _said_by(backend.name, f"unexpected error: {type(exc).__name__}: {exc}")
    return readings, ""


def _take(tracks: Tracks, name: str, readings: Sequence[DeviceReading], asked_at: float,
          settled: bool, config: IdleConfig) -> bool:
    """Add backend ``name``'s readings, of a query begun at ``asked_at`` (CLOCK_BOOTTIME), to
    ``tracks``; True once all its devices are decided."""
    for reading in readings:
        _update(tracks, reading, asked_at, settled, config)
    present = {r.id for r in readings}
    for (source, ident), track in tracks.items():
        if source == name and ident not in present and track.decided in (None, "idle"):
            _fall_silent(track, f"when {name} no longer reported it", f"no longer reported by {name}")
    return all(t.decided for (src, _), t in tracks.items() if src == name)


def _close(tracks: Tracks, failed: dict[str, str], samples: int, elapsed: float) -> None:
    """Decide the tracks sampling left open: their backend failed, or the deadline came."""
    for (source, _), track in tracks.items():
        if track.decided is None and source in failed:
            _fall_silent(track, f"when {source} stopped answering ({failed[source]})",
                         f"no verdict: {failed[source]}")
        elif track.decided is None:
            _at_deadline(track, samples, elapsed)


def _fall_silent(track: _Track, busy_why: str, unknown_why: str) -> None:
    """Decide a device its backend no longer gives a reading for (gone from its list, no
    figure, no answer): busy if its last reading was, since silence proves nothing; else unknown."""
    if track.busy is not None and track.idle_run == 0:
        track.decided, track.why = "busy", busy_why
    else:
        track.decided, track.why = "unknown", unknown_why


def _update(tracks: Tracks, reading: DeviceReading, asked_at: float,
            settled: bool, config: IdleConfig) -> None:
    if reading.state != "unknown":
        # One threshold for the whole run: this config's, whatever the
        # backend was built with.
        reading = dataclasses.replace(
            reading, state=judge(reading.readings, config.busy_threshold)[0])
    track = tracks.setdefault((reading.source, reading.id), _Track(reading))
    for proc in reading.processes:
        # The latest words about it, and when it was first listed: a job that opened the
        # device between two samples is listed from the later one on.
        seen = track.processes.get(proc.pid)
        track.processes[proc.pid] = dataclasses.replace(
            proc, listed_at=seen.listed_at if seen else asked_at)
    if track.decided == "idle" and reading.state != "idle":
        track.decided, track.why = None, ""  # asked on for another device: later words count
    elif track.decided:
        return
    samples = config.samples
    track.latest = reading
    if reading.state == "unknown":
        why = reading.reason or "no utilization reading"
        _fall_silent(track, f"when it gave no reading any more ({why})", why)
    elif reading.state == "idle":
        track.idle_run += 1
        if track.idle_run >= samples:
            track.decided = "idle"
    else:
        track.idle_run, track.busy = 0, reading
        if settled:
            track.decided = "busy"


def _at_deadline(track: _Track, samples: int, elapsed: float) -> None:
    if track.latest.state == "busy":
        # The deadline cut the settle short while it still computed: that is
        # evidence of work, not a lack of it.
        track.decided = "busy"
        track.why = f"still busy at the deadline ({elapsed:.1f} s)"
    else:
        track.decided = "unknown"
        track.why = (f"no verdict before the deadline ({elapsed:.1f} s): "
                     f"idle for {track.idle_run} of {samples} samples")


def _busy_reason(track: _Track, config: IdleConfig) -> str:
    reading = track.busy or track.latest
    load = reading.load()
    figure = f"{load[0]} {_pct(load[1])}" if load else "busy"
    when = track.why or f"after {config.settle_s:.1f} s settle"
    return (f"{reading.id} ({reading.source}): {figure} > "
            f"{_pct(config.busy_threshold)} {when}")


def _verdict(
    config: IdleConfig,
    families: Counter[str],
    families_of: Mapping[str, str],
    used: list[Backend],
    tracks: Tracks,
    failed: dict[str, str],
    statuses: tuple[BackendStatus, ...],
) -> IdleReport:
    vetoes: list[str] = []
    warnings: list[str] = []
    unknown: list[tuple[str, str]] = []
    busy_ones: list[tuple[str, str]] = []
    states: list[ReportState] = []
    sources = {b.name: b.family for b in used}
    for family in families:
        mine = {key: t for key, t in tracks.items() if sources.get(key[0]) == family}
        busy = [t for t in mine.values() if t.decided == "busy"]
        said = [((t.busy or t.latest).id, _busy_reason(t, config)) for t in busy]
        busy_ones += said
        vetoes += [why for _, why in said]
        # Known needs one backend that read every device it knows, and knows as many as
        # were found. A busy device does not answer for the others: one no backend read
        # stays unknown, which the look before the drain vetoes on (guard/device_view.py).
        read = ("idle", "busy") if busy else ("idle",)
        listed = Counter(src for src, _ in mine)
        whole = [
            name for name, fam in sources.items()
            if fam == family and name not in failed and listed[name]
            and all(t.decided in read for (src, _), t in mine.items() if src == name)
        ]
        if any(listed[name] >= families[family] for name in whole):
            states.append("busy" if busy else "idle")
            continue
        states.append("busy" if busy else "unknown")
        why = [failed[b.name] for b in used if b.family == family and b.name in failed]
        why += [f"{name} reports {listed[name]} of the {families[family]} devices found"
                for name in whole]
        why += [f"{t.latest.id} ({t.latest.source}): {t.why}"
                for t in mine.values() if t.decided == "unknown"]
        if not any(b.family == family for b in used):
            why += [_said_by(s.name, s.reason) for s in statuses
                    if not s.available and families_of.get(s.name) == family]
        text = f"{family}: no idle backend could answer ({'; '.join(why) or 'none configured'})"
        unknown.append((family, f"{text}; vetoed by [idle] on_unknown = veto"))
        if busy:
            continue  # its busy devices veto already; a second text would say no more
        if config.on_unknown == "veto":
            vetoes.append(unknown[-1][1])
        else:
            warnings.append(f"{text}; allowed by [idle] on_unknown = allow")

    state: ReportState = (
        "busy" if "busy" in states else "unknown" if "unknown" in states else "idle"
    )
    devices = tuple(t.report() for t in tracks.values())
    return IdleReport(state, devices, statuses, tuple(vetoes), tuple(warnings), tuple(unknown),
                      busy=tuple(busy_ones))
