"""The one table of defaults: every section, key, kind, default and help.

Each section is a frozen dataclass whose fields are made by ``setting()``:
the field carries its key's Spec (default, kind, help, choices) in its
metadata, and ``SCHEMA`` is read off the dataclasses. So a key is written
once, as a typed attribute next to its default and its help.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from suspendguard.config.backends import FAMILIES, IDLE_BACKENDS
from suspendguard.config.cluster import SlurmConfig
from suspendguard.config.spec import DAY_S, TIMEOUT, WAIT, Bounds, Spec, setting

DEFAULT_STATE_DIR = "/var/lib/suspendguard"

@dataclass(frozen=True, slots=True)
class Rule:
    """A policy rule: every field given must match.

    comm and cmdline are the process's own to set, so any user's process can
    match a rule on them alone; user and uid are not, exe and unit only
    within limits (RULE_HELP says which).
    """

    comm: str | None = None
    exe: str | None = None
    cmdline: str | None = None
    user: str | None = None
    uid: int | None = None
    unit: str | None = None

    def describe(self) -> str:
        parts = [f"{k}={getattr(self, k)!r}" for k in RULE_FIELDS if getattr(self, k) is not None]
        return ", ".join(parts)

    @property
    def forgeable(self) -> bool:
        """It matches by name or command line alone: any user's process can match it."""
        return all(getattr(self, k) is None for k in RULE_FIELDS if k not in FORGEABLE)


RULE_FIELDS = tuple(f.name for f in fields(Rule))
# What a launcher is matched on: it runs as its ranks' uid, which is checked
# anyway, so only what names the program.
LAUNCHER_MATCH = ("comm", "exe", "cmdline")
# How a launcher is stopped (guard/jobs.py): it gets the signal and forwards
# it, it is stopped while its ranks get the signal from the guard, or it is
# left alone while they do.
LAUNCHER_STOPS = ("forward", "hold", "ranks")


@dataclass(frozen=True, slots=True)
class DrainRule:
    """A job's own wait after the signal ([[policy.drain]]): a match and its timeout_s."""

    match: Rule
    timeout_s: float


@dataclass(frozen=True, slots=True)
class LauncherRule:
    """A site's own launcher ([[drain.launchers]]): how it is told and how it is stopped."""

    match: Rule
    stop: str
    name: str = ""
    restarts: str = ""  # what it does when a rank leaves, in the reason's words


# The match kinds a process sets for itself (prctl(PR_SET_NAME), its argv).
FORGEABLE = ("comm", "cmdline")
# Each match kind, and who can make a process match it: the config's comments
# and the manual say it next to the kind.
RULE_HELP: dict[str, str] = {
    "comm": "process name (/proc/PID/comm), exact: any user can set it (prctl PR_SET_NAME)",
    "cmdline": "regular expression searched in the command line (its arguments joined by "
               "spaces): any user can set it",
    "user": "user name, or uid as text, it runs as: only root can change it",
    "uid": "uid it runs as, an integer: only root can change it",
    "exe": "glob on the executable path as the process sees it: on the host only who may "
           "write that folder can put a program there; in its own mount namespace (a "
           "container, a user namespace) a process sees its own files: pair it with uid",
    "unit": "glob on its innermost systemd unit (its cgroup): root alone starts system "
            "units, but any user can name a user unit anything: pair it with uid",
}


@dataclass(frozen=True, slots=True)
class EscalationStep:
    signal: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class DevicesConfig:
    families: tuple[str, ...] = setting(
        list(FAMILIES), "choices", "Built-in node lists to use (ascend, nvidia).", FAMILIES,
    )
    nodes: tuple[str, ...] = setting([], "globs", "Extra compute nodes (globs).")
    management: tuple[str, ...] = setting([], "globs", "Extra management nodes (globs).")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    protect: tuple[Rule, ...] = setting(
        [], "rules",
        "Rules for holders never signalled; while one runs the suspend is vetoed.",
    )
    ignore: tuple[Rule, ...] = setting(
        [], "rules", "Rules for holders that do not count and are never signalled.",
    )
    kubernetes: str = setting(
        "veto", "choice",
        "A holder in a Kubernetes pod: veto (the kubelet would restart it), or drain it anyway.",
        ("veto", "drain"),
    )
    drain: tuple[DrainRule, ...] = setting(
        [], "drainrules",
        "Rules that give the holders they match a wait of their own after the signal, e.g. "
        '{ uid = 1000, exe = "/usr/bin/python3*", timeout_s = 90 } for a job whose checkpoint '
        "takes longer than [drain] timeout_s: the same fields as protect and ignore, plus "
        "timeout_s; the first that matches counts, and a drain waits as long as the longest "
        "wait among the holders it signals, within [drain] deadline_s.",
    )


@dataclass(frozen=True, slots=True)
class DrainConfig:
    signal: str = setting("SIGINT", "signal", "Signal sent to each holder to ask it to stop.")
    timeout_s: float = setting(
        30.0, "float", "Seconds to wait for holders to exit after the signal.", bounds=TIMEOUT,
    )
    rounds: int = setting(2, "int", "Rescans after the wait for holders that appeared meanwhile.",
                          bounds=Bounds(0, 100))
    escalate: tuple[EscalationStep, ...] = setting(
        [], "escalate",
        'Opt-in escalation steps "SIGNAL:SECONDS", e.g. ["SIGTERM:10", "SIGKILL:5"].',
    )
    on_sigint_ignored: str = setting(
        "veto", "choice",
        "A holder that ignores the signal: veto, escalate, or signal-anyway.",
        ("veto", "escalate", "signal-anyway"),
    )
    jupyter: str = setting(
        "veto", "choice",
        "A Jupyter kernel (ipykernel), which never exits on SIGINT: veto, naming the kernel, or "
        "shutdown: ask the kernel to shut down through its own control channel and wait for it. "
        "A kernel busy in a cell exits only once the cell ends; it is never signalled.",
        ("veto", "shutdown"),
    )
    launchers: tuple[LauncherRule, ...] = setting(
        [], "launchers",
        'Launchers besides the built-in ones (torchrun, accelerate, deepspeed, msrun, mpirun), '
        'e.g. { exe = "/opt/mylab/bin/launch", stop = "hold" }: matched on comm, exe or '
        'cmdline, and only as an ancestor of a holder running as the same uid; stop = '
        '"forward" sends it the signal, which it passes to its ranks, "hold" stops it '
        '(SIGSTOP) while its ranks get the signal, and continues it once they left, "ranks" '
        'signals its ranks and leaves it alone.',
    )
    deadline_s: float = setting(
        100.0, "float",
        "Hard limit for one guard run; the unit's TimeoutStartSec is this plus 20 s. Must leave "
        "room for timeout_s, the escalation steps and, with idle backends, settle_s plus "
        "twice command_timeout_s (a reading before the drain) plus 1 s, plus 2 s to answer.",
        bounds=TIMEOUT,
    )


@dataclass(frozen=True, slots=True)
class IdleConfig:
    backends: tuple[str, ...] = setting(
        list(IDLE_BACKENDS), "choices",
        "Idle backends to try, in order; those that probe OK are used.", tuple(IDLE_BACKENDS),
    )
    samples: int = setting(3, "int", "Consecutive idle readings needed to call a device idle.",
                           bounds=Bounds(1, 1000))
    interval_ms: int = setting(200, "int", "Milliseconds between readings.",
                               bounds=Bounds(0, DAY_S * 1000))
    settle_s: float = setting(
        3.0, "float", "Seconds a device may take to read idle after a drain.", bounds=WAIT,
    )
    busy_threshold: float = setting(
        0.0, "float", "Utilization percent above which a reading is busy.", bounds=Bounds(0, 100),
    )
    on_unknown: str = setting(
        "veto", "choice",
        "When no backend can answer for an Ascend or NVIDIA device found: veto, or allow "
        "(warn). Extra nodes ([devices] nodes) have no backend and are not asked.",
        ("allow", "veto"),
    )
    # Besides command_timeout_s, the keys below belong to one backend each
    # (IDLE_BACKENDS says whose), which reads its own when it is made.
    npu_smi: str = setting("npu-smi", "str", "The npu-smi command (name on PATH or a path).")
    nvidia_smi: str = setting(
        "nvidia-smi", "str",
        "The nvidia-smi command (name on PATH or a path); asked when NVML (nvidia-ml-py) "
        "cannot be imported.",
    )
    command_timeout_s: float = setting(5.0, "float", "Timeout for each backend query.",
                                       bounds=TIMEOUT)
    ascend_env: str = setting(
        "", "str", "Absolute path of the set_env.sh sourced for the pyACL probe; empty: first "
        "of the CANN defaults.",
    )
    dcmi_library: str = setting(
        "", "str", "Absolute path of libdcmi.so; empty: search the driver's default places.",
    )


@dataclass(frozen=True, slots=True)
class LogsConfig:
    paths: tuple[str, ...] = setting(
        [
            "$ASCEND_PROCESS_LOG_PATH/**",
            "$ASCEND_WORK_PATH/log/**",
            "~/ascend/log/**",
            "/var/log/npu/slog/**",
        ],
        "list",
        "Globs of Ascend log files; ~ means root's and each holder's home.",
    )
    max_bytes: int = setting(
        64 * 1024 * 1024, "int", "At most this many bytes per file, from its end.",
        bounds=Bounds(0, 1024 * 1024 * 1024),
    )
    clock_slack_s: float = setting(
        5.0, "float",
        "After resume, also read device-log lines stamped this many seconds before the "
        "attempt began (device clocks lag or lead the host's).", bounds=WAIT,
    )


@dataclass(frozen=True, slots=True)
class RestoreConfig:
    after_resume: bool = setting(
        True, "bool", "After resume, start again the supervised jobs the guard stopped.",
    )
    after_veto: bool = setting(
        True, "bool", "After a veto, start again at once the supervised jobs the guard stopped.",
    )
    skip: tuple[str, ...] = setting(
        [], "list", 'Owners never started again (globs of owner keys, e.g. "systemd-service:train-*").',
    )
    earlier_boot: str = setting(
        "leave", "choice",
        "A job stopped in an earlier boot (the machine lost power or rebooted while asleep): "
        "leave it down, listed by status with the command that starts it, or start it.",
        ("leave", "start"),
    )
    transient: str = setting(
        "veto", "choice",
        "A holder in a transient user unit (systemd-run --user), which cannot be made again "
        "after resume: veto, or drain it anyway.",
        ("veto", "drain"),
    )


@dataclass(frozen=True, slots=True)
class ResumeConfig:
    health_check: bool = setting(
        True, "bool",
        "After resume, check each device found before any job is started again "
        "(docs/after-resume.md).",
    )
    health_timeout_s: float = setting(
        20.0, "float", "Seconds one health probe (a child process) may take; then it is killed.",
        bounds=TIMEOUT,
    )
    ready_timeout_s: float = setting(
        30.0, "float",
        "Ascend: how long to wait, with a growing pause, for a device that is not ready yet.",
        bounds=WAIT,
    )
    ascend_healthy: tuple[str, ...] = setting(
        ["OK", "Warning"], "choices",
        "npu-smi Health words a chip is healthy with, whatever it read before the suspend "
        '(add "Alarm" for boards that read it in plain use, such as the Atlas 310B4; also '
        "slurm health's).",
        ("OK", "Warning", "Alarm", "Critical"),
    )
    repair: bool = setting(
        True, "bool",
        "Repair an unhealthy device while the drained jobs are still stopped "
        "(NVIDIA: reload nvidia_uvm, restart nvidia-persistenced).",
    )
    restore_on_unhealthy: str = setting(
        "hold", "choice",
        "A device still unhealthy after the repairs: hold its jobs (start them with "
        "restore --force), or restore them anyway.",
        ("hold", "restore"),
    )
    cuda_library: str = setting(
        "libcuda.so.1", "str",
        "The CUDA driver library the health probe loads (a name the loader finds, or a path).",
    )
    modprobe: str = setting("modprobe", "str", "The modprobe command (name on PATH or a path).")


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    desktop: bool = setting(
        True, "bool",
        "When the guard refuses a suspend, send a desktop notification (urgency critical) to "
        "the user of each active graphical login session, on that user's session bus.",
    )
    wall: bool = setting(
        True, "bool",
        "When the guard refuses a suspend, write a message to the terminal of each text login "
        "(a console or an ssh session; as wall does, and a terminal with mesg n is left alone; "
        "a desktop's own terminal is not written: its users get the desktop notification).",
    )
    users: tuple[str, ...] = setting(
        [], "list",
        "User names who are told, by desktop notification and on their terminals; empty: "
        "every user with an active login session.",
    )
    retry: bool = setting(
        False, "bool",
        "When a suspend that logind started (the lid, the idle action, systemctl suspend) is "
        "refused for a cause that passes (a transient holder), ask for it again once the "
        "cause is gone.",
    )
    timeout_s: float = setting(
        3.0, "float",
        "Seconds all the telling may take after the verdict, within what is left of "
        "[drain] deadline_s; a notification not delivered by then is given up (a warning in "
        "the log). 0 tells no one.", bounds=WAIT,
    )


@dataclass(frozen=True, slots=True)
class StateConfig:
    dir: str = setting(DEFAULT_STATE_DIR, "path", "History database and state.")


# The file's sections, in the order they are printed; Config has one
# attribute of the same name for each.
SECTIONS: dict[str, type] = {
    "devices": DevicesConfig,
    "policy": PolicyConfig,
    "drain": DrainConfig,
    "idle": IdleConfig,
    "logs": LogsConfig,
    "restore": RestoreConfig,
    "resume": ResumeConfig,
    "notify": NotifyConfig,
    "slurm": SlurmConfig,
    "state": StateConfig,
}

SCHEMA: dict[str, dict[str, Spec]] = {
    section: {f.name: f.metadata["spec"] for f in fields(record)}
    for section, record in SECTIONS.items()
}


@dataclass(frozen=True, slots=True)
class Config:
    """The effective configuration: one record per section, where it came from."""

    devices: DevicesConfig
    policy: PolicyConfig
    drain: DrainConfig
    idle: IdleConfig
    logs: LogsConfig
    restore: RestoreConfig
    resume: ResumeConfig
    notify: NotifyConfig
    slurm: SlurmConfig
    state: StateConfig
    path: str | None = None
    loaded: bool = False
    # Why root may not act on this configuration (config/trust.py); empty
    # when it may, or when the guard does not run as root.
    trust: tuple[str, ...] = ()
