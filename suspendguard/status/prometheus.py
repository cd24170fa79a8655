"""``suspendguard status --prometheus``: the Prometheus text exposition format (0.0.4).

A collector over the typed status report, rendered by prometheus-client (the
Prometheus project's own client; python3-prometheus-client in Debian), for
node_exporter's textfile collector: a one-shot report, not a server. Names
follow Prometheus conventions: the ``suspendguard_`` prefix, base units in
the name (``_seconds``, ``_bytes``, ``_ratio``, ``_watts``), ``_total`` for
counters, and one series per label value set to 1 (0 for the others) for
states, so that alerts can say ``== 1``.

Each metric is one line in the function of its part of the report, e.g.
``m.gauge("suspendguard_x", "What x is").add(value, label="...")``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from suspendguard.idle.base import IdleReport
from suspendguard.install.templates import instance
from suspendguard.model import SLEEP_ACTIONS, Action, Disposition, Unavailable
from suspendguard.status.model import RecentHistory, Status
from suspendguard.store.mode import MODES
from suspendguard.system.dbus.logind import LogindInfo
from suspendguard.verdict import Reason

ACTIONS: tuple[Action, ...] = ("drain", "protect", "ignore", "never", "keep")
DISPOSITIONS: tuple[Disposition, ...] = ("default", "caught", "ignored", "blocked", "waited",
                                        "unknown")
DEVICE_STATES = ("busy", "idle", "unknown")
VERDICTS = ("allow", "veto", "unknown")
# The final verdicts of recorded attempts; others seen in a database are added.
# "running" is no final verdict (it becomes allow or veto): a gauge of its own,
# so the counter never goes down.
ATTEMPT_VERDICTS = ("allow", "veto", "unknown", "interrupted")
CAN_ANSWERS = ("yes", "no", "challenge", "na")
# Health answers, best to worst; one not known here (a damaged row) ranks as unknown.
HEALTH_RANK = {"healthy": 0, "unknown": 1, "unhealthy": 2}
PARTS = ("config", "accelerators", "installation", "logind", "systemd", "history")

Labels = Mapping[str, str]


@dataclass
class Family:
    """One metric's samples as they are added; a prometheus-client family once complete."""

    name: str
    kind: str  # gauge | counter
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> Family:
        self.samples.append((labels, value))
        return self

    def metric(self) -> Metric:
        names = list(self.samples[0][0]) if self.samples else []
        family = (CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily)(
            self.name, self.help, labels=names)
        for labels, value in self.samples:
            if set(labels) != set(names):
                raise ValueError(f"{self.name}: labels {sorted(labels)}, not {sorted(names)}")
            family.add_metric([labels[n] for n in names], value)
        return family


class Metrics:
    """The families of one report, in the order they are first added."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def family(self, name: str, kind: str, help: str) -> Family:
        if name not in self.families:
            self.families[name] = Family(name, kind, help)
        return self.families[name]

    def gauge(self, name: str, help: str) -> Family:
        return self.family(name, "gauge", help)

    def counter(self, name: str, help: str) -> Family:
        assert name.endswith("_total"), name
        return self.family(name, "counter", help)

    def one_of(self, name: str, help: str, label: str, chosen: str | None,
               values: Iterable[str], **labels: str) -> None:
        """A state as one series per possible value, 1 for the one that holds."""
        family = self.gauge(name, help)
        known = list(values)
        if chosen is not None and chosen not in known:
            known.append(chosen)
        for v in known:
            family.add(1 if v == chosen else 0, **labels, **{label: v})

    def collect(self) -> Iterator[Metric]:
        for family in self.families.values():
            yield family.metric()


def _flag(value: object) -> float:
    return 1.0 if value else 0.0


def _reading_metric(key: str, value: float) -> tuple[str, str, float, str] | None:
    """(metric, reading label, value in base units, help) for a backend reading."""
    if key.endswith("_pct"):
        return ("suspendguard_device_utilization_ratio", key[:-4], value / 100.0,
                "Utilization the device reports (0-1), by reading (aicore, gpu, ...)")
    if key.endswith("_mb"):
        return ("suspendguard_device_memory_bytes", key[:-3], value * 1024 * 1024,
                "Device memory the device reports, by reading (hbm_used, hbm_total, ...)")
    if key == "power_w":
        return ("suspendguard_device_power_watts", "power", value,
                "Power draw the device reports")
    if key == "temp_c":
        return ("suspendguard_device_temperature_celsius", "temperature", value,
                "Temperature the device reports")
    return None


def _by_code(gauge: Family, reasons: Sequence[Reason]) -> None:
    """How many reasons of each code (docs/json-and-metrics.md has the codes)."""
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r.code] = counts.get(r.code, 0) + 1
    for code, count in sorted(counts.items()):
        gauge.add(count, code=code)


def _accelerators(m: Metrics, s: Status) -> None:
    report, now = s.report, s.verdict()
    verdict = now if not isinstance(now, Unavailable) else (
        None if isinstance(report, Unavailable) else report.verdict)
    if verdict is not None:  # one verdict for every series: status's own
        m.one_of("suspendguard_verdict", "What check --dry-run would give now (1 for the "
                 "verdict)", "verdict", verdict.kind, VERDICTS)
        m.gauge("suspendguard_verdict_reasons", "Reasons a suspend would be refused now").add(
            len(verdict.reasons))
        _by_code(m.gauge("suspendguard_verdict_reason",
                         "Reasons a suspend would be refused now, by reason code"),
                 verdict.reasons)
        m.gauge("suspendguard_verdict_warnings", "Warnings the dry run gave now").add(
            len(verdict.warnings))
    if isinstance(report, Unavailable):
        return
    nodes = m.gauge("suspendguard_device_nodes", "Accelerator device nodes found, by family and role")
    counts: dict[tuple[str, str], int] = {}
    for n in report.inventory.nodes:
        counts[(n.family, n.role)] = counts.get((n.family, n.role), 0) + 1
    for (family, role), count in sorted(counts.items()):
        nodes.add(count, family=family, role=role)

    by_action = dict.fromkeys(ACTIONS, 0)
    by_sigint = dict.fromkeys(DISPOSITIONS, 0)
    for hr in report.holders:
        by_action[hr.decision.action] = by_action.get(hr.decision.action, 0) + 1
        by_sigint[hr.decision.holder.sigint] = by_sigint.get(hr.decision.holder.sigint, 0) + 1
    holders = m.gauge("suspendguard_holders",
                      "Processes holding an accelerator now, by what the guard would do")
    for action, count in by_action.items():
        holders.add(count, action=action)
    sigint = m.gauge("suspendguard_holders_sigint",
                     "Processes holding an accelerator now, by their SIGINT disposition")
    for disposition, count in by_sigint.items():
        sigint.add(count, disposition=disposition)
    m.gauge("suspendguard_unreadable_processes",
            "Processes whose open files could not be inspected (not root, or refused)").add(
        report.unreadable)

    idle = report.idle
    m.one_of("suspendguard_idle_state", "The idle check's overall answer now (1 for the state)",
             "state", idle.state, ("idle", "busy", "unknown", "none", "skipped"))
    if not isinstance(idle, IdleReport):
        return
    for dev in idle.devices:
        # The reading carries its backend's family: no need to import every backend to look it up.
        labels = {"device": dev.id, "family": dev.family, "source": dev.source}
        m.one_of("suspendguard_device_state",
                 "Each device's state as the idle check read it (1 for the state)",
                 "state", dev.state, DEVICE_STATES, **labels)
        for key, value in dev.readings.items():
            if not isinstance(value, (int, float)):
                continue
            metric = _reading_metric(key, float(value))
            if metric is not None:
                name, reading, number, help = metric
                m.gauge(name, help).add(number, **labels, reading=reading)
    backends = m.gauge("suspendguard_idle_backend_available",
                       "Idle backends usable here (1) or not (0)")
    for b in idle.backends:
        backends.add(_flag(b.available), backend=b.name)


def _installation(m: Metrics, s: Status) -> None:
    inst = s.installation
    m.gauge("suspendguard_installed",
            "1 when the veto unit is enabled for every sleep service and the hook is executable"
            ).add(_flag(inst.installed))
    enabled = m.gauge("suspendguard_unit_enabled",
                      "The veto unit is enabled for this sleep action (1) or not (0)")
    for i in inst.instances:
        enabled.add(_flag(i.enabled), action=i.action)
    m.gauge("suspendguard_hook_executable", "The sleep hook is present and executable").add(
        _flag(inst.hook.executable))
    m.gauge("suspendguard_config_valid",
            "The configuration file is valid (or absent: defaults) (1) or invalid (0)").add(
        _flag(s.config.valid))
    m.gauge("suspendguard_suspend_refused",
            "1 when every suspend will be refused whatever runs now (invalid or untrusted "
            "config, the unit's interpreter missing, no idle backend in enforce mode), where "
            "the veto unit guards suspend; else 0").add(_flag(s.refused_now() is not None))
    m.one_of("suspendguard_mode",
             "What the veto unit does at a suspend (1 for the mode): enforce, observe (signals "
             "and refuses nothing), off (no look), or unknown (a user who may not read it)",
             "mode", s.mode.name, (*MODES, "unknown"))
    m.gauge("suspendguard_state_dir_writable",
            "The state directory is writable by the user running status").add(
        _flag(s.state_dir.writable))


def _logind(m: Metrics, s: Status) -> None:
    info = s.logind
    available = isinstance(info, LogindInfo)
    m.gauge("suspendguard_logind_available", "logind answered over D-Bus (1) or not (0)").add(
        _flag(available))
    if not isinstance(info, LogindInfo):
        return
    m.one_of("suspendguard_logind_can_suspend", "logind's CanSuspend answer (1 for the answer)",
             "answer", info.can_suspend, CAN_ANSWERS)
    m.one_of("suspendguard_logind_can_hibernate",
             "logind's CanHibernate answer (1 for the answer)",
             "answer", info.can_hibernate, CAN_ANSWERS)
    locks: dict[tuple[str, str], int] = {}
    for i in info.inhibitors:
        for what in i.whats:
            locks[(what, i.mode)] = locks.get((what, i.mode), 0) + 1
    inhibitors = m.gauge("suspendguard_logind_inhibitors", "logind inhibitor locks, by what and mode")
    for (what, mode), count in sorted(locks.items()):
        inhibitors.add(count, what=what, mode=mode)
    if not locks:
        inhibitors.add(0, what="sleep", mode="block")
    m.gauge("suspendguard_logind_sleep_blockers",
            "Block locks on sleep held by another process (they stop users' suspends)").add(
        len(s.sleep_blockers()))
    m.gauge("suspendguard_logind_inhibit_delay_max_seconds",
            "logind's InhibitDelayMaxUSec, in seconds").add(info.inhibit_delay_max_usec / 1e6)
    m.gauge("suspendguard_logind_preparing_for_sleep", "logind's PreparingForSleep").add(
        _flag(info.preparing_for_sleep))


def _systemd(m: Metrics, s: Status) -> None:
    units = s.systemd
    m.gauge("suspendguard_systemd_available",
            "systemd's manager answered over D-Bus (1) or not (0)").add(
        _flag(not isinstance(units, Unavailable)))
    if isinstance(units, Unavailable):
        return
    loaded = m.gauge("suspendguard_veto_unit_loaded", "The veto unit instance is loadable by systemd")
    failed = m.gauge("suspendguard_veto_unit_failed",
                     "The veto unit's last run failed (it vetoed a sleep, or broke)")
    for action in SLEEP_ACTIONS:
        u = units.get(instance(action))
        if u is None:
            continue
        loaded.add(_flag(u.load_state == "loaded"), unit=u.name, action=action)
        failed.add(_flag(u.active_state == "failed"), unit=u.name, action=action)
        if u.result is not None:
            m.gauge("suspendguard_veto_unit_result",
                    "The veto unit's last Result= as systemd reports it (1 for the result)").add(
                1, unit=u.name, action=action, result=u.result)


def _absent(path: str) -> bool:
    """Nothing at ``path``; a folder this user may not enter (EACCES) hides what is there."""
    try:
        os.lstat(path)
    except OSError as exc:
        return exc.errno in (errno.ENOENT, errno.ENOTDIR)
    return False


def _history(m: Metrics, s: Status) -> None:
    h = s.history.recent
    if isinstance(h, Unavailable):
        if not _absent(s.history.path):
            # Unreadable (locked, EIO, a folder this user may not enter): left out, as a 0 would
            # read as a counter reset, and the next scrape's whole history as new attempts.
            return
        h = RecentHistory((), {}, {})  # no history yet: none recorded
    attempts = m.counter("suspendguard_attempts_total",
                         "Suspend attempts the guard recorded (dry runs excluded), by verdict")
    counts = dict.fromkeys(ATTEMPT_VERDICTS, 0)
    counts.update(h.counts)
    running = counts.pop("running", 0)
    for verdict, count in counts.items():
        attempts.add(count, verdict=verdict)
    m.gauge("suspendguard_attempts_running", "Suspend attempts in progress now").add(running)
    findings = m.counter("suspendguard_findings_total",
                         "Documented failures found in device logs after resume, by rule")
    for rule, count in sorted(h.findings.items()):
        findings.add(count, rule=rule)
    if not h.attempts:
        return
    last = h.attempts[0]
    m.gauge("suspendguard_last_attempt_timestamp_seconds",
            "When the last recorded suspend attempt started (Unix time)").add(last.started)
    if last.duration is not None:
        m.gauge("suspendguard_last_attempt_duration_seconds",
                "How long the guard took in the last recorded suspend attempt").add(last.duration)
    m.one_of("suspendguard_last_attempt_verdict",
             "The last recorded suspend attempt's verdict (1 for the verdict)",
             "verdict", last.result, (*ATTEMPT_VERDICTS, "running"))
    _by_code(m.gauge("suspendguard_last_attempt_reason",
                     "Reasons the last recorded suspend attempt was refused, by reason code"),
             last.verdict.reasons)
    drained = m.gauge("suspendguard_last_attempt_holders",
                      "Holders in the last recorded attempt, by outcome")
    outcomes: dict[str, int] = {}
    for row in last.holders:
        outcomes[row.outcome.kind] = outcomes.get(row.outcome.kind, 0) + 1
    for outcome, count in sorted(outcomes.items()):
        drained.add(count, outcome=outcome)


def _after_resume(m: Metrics, s: Status) -> None:
    """Jobs held after resume, doctor's findings, each device's state at the last health check."""
    m.gauge("suspendguard_jobs_held",
            "Jobs kept stopped after resume because a device is unhealthy").add(
        sum(1 for p in s.not_restored() if p.result == "held"))
    found = m.gauge("suspendguard_doctor_findings",
                    "suspendguard doctor's findings on this host, by severity")
    for severity in ("error", "warning", "note"):
        found.add(sum(1 for f in s.doctor if f.severity == severity), severity=severity)
    # Several sources answer for one device (CUDA and NVML, npu-smi and pyACL): its worst state.
    worst: dict[tuple[str, str], str] = {}
    for row in s.health():
        key = (row.device, row.family)
        worst[key] = max(worst.get(key, row.state), row.state, key=lambda v: HEALTH_RANK.get(v, 1))
    for (device, family), state in worst.items():
        m.one_of("suspendguard_device_health",
                 "Each device's state at the last health check after resume (1 for the state)",
                 "state", state, ("healthy", "unhealthy", "unknown"), device=device, family=family)


def _parts(s: Status) -> dict[str, bool]:
    return {
        "config": s.config.valid,
        "accelerators": not isinstance(s.report, Unavailable),
        "installation": True,
        "logind": isinstance(s.logind, LogindInfo),
        "systemd": not isinstance(s.systemd, Unavailable),
        "history": not isinstance(s.history.recent, Unavailable),
    }


class StatusCollector:
    """The metrics of one status report, for a prometheus-client registry."""

    def __init__(self, status: Status) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        s = self.status
        m = Metrics()
        m.gauge("suspendguard_up", "1: the status report was made").add(1)
        part = m.gauge("suspendguard_status_part_available",
                       "Each part of the status report could be read (1) or not (0); "
                       "suspendguard status --json says why")
        for name, ok in _parts(s).items():
            part.add(_flag(ok), part=name)
        m.gauge("suspendguard_status_duration_seconds", "How long the status report took").add(
            round(s.duration_s, 3))
        m.gauge("suspendguard_status_root", "The report was made as root (1) or not (0)").add(
            _flag(s.root))
        _accelerators(m, s)
        _installation(m, s)
        _logind(m, s)
        _systemd(m, s)
        _history(m, s)
        _after_resume(m, s)
        return m.collect()


def render(collector: Metrics | StatusCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def exposition(s: Status) -> str:
    return render(StatusCollector(s))
