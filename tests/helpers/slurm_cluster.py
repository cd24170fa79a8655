"""A real Slurm 22.05 cluster in three booted containers: a controller and two compute nodes.

    with SlurmCluster(repo, suspend_time=5) as cluster:
        cluster.start_daemons()
        cluster.ctl.run("srun", "-w", "node1", "hostname")

Each machine is a :class:`~helpers.systemd_harness.Container` (this host's
/usr, a volatile root, a fake /sys/power), all three joined to one network
namespace this helper makes (``ip netns add``) and deletes again: a veth
pair inside it, 10.77.0.1/24 on one end, 10.77.0.2 and 10.77.0.3 on the
other. Nothing leaves it: no route, no link out of it. Slurm needs an
address other than loopback (getaddrinfo with AI_ADDRCONFIG fails with
only ``lo``), which is why it is not each container's private network.

- ``ctl`` (10.77.0.1): slurmctld; the SuspendProgram and ResumeProgram
  wrappers (/etc/slurm/suspend.sh, resume.sh) that log each call to
  /var/log/slurm/power.log and run the guard's ``slurm suspend|resume``;
  the ssh key the controller reaches the nodes with.
- ``node1`` (10.77.0.2, slurmd port 6818), ``node2`` (10.77.0.3, port
  6819): slurmd started as ``-N nodeN``, sshd listening on the node's own
  address only (the three share one network stack), the guard installed
  with a test device node and a stand-in npu-smi, and the
  HealthCheckProgram wrapper /etc/slurm/health.sh; a system-sleep hook
  stops slurmd once the node "slept" (ASLEEP_HOOK), so that it stays
  silent until Slurm wakes it, as a sleeping machine is.

Every machine gets the same munge key, /etc/hosts, slurm.conf and guard
config. The hostnames are set to ctl, node1, node2 (slurmctld refuses to
run on a host whose name is not its SlurmctldHost). :meth:`start_daemons`
starts munge everywhere, slurmctld, then the slurmds, and waits for both
nodes to be idle; a test that must hold a device before a node first
registers does so before calling it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from helpers import FAKES, FIXTURES
from helpers.systemd_harness import MASKED, BootsOnEnter, Container, HarnessError

SLURM_UNITS = ("munge.service", "ssh.service", "ssh.socket", "sshd.service",
               "slurmd.service", "slurmctld.service")
# The harness's list, less the daemons this cluster runs (their packages' presets enable
# them in every container; here they are wanted, and started in order by start_daemons).
SLURM_MASKED = tuple(unit for unit in MASKED if unit not in SLURM_UNITS)
MUNGE_UID = 901
SLURM_UID = 64030
KEY = "/etc/suspendguard/slurm_key"  # the controller's key for root@node*, readable by slurm
EXCLUDE = "/var/lib/slurm/suspendguard-exclude.conf"
POWER_LOG = "/var/log/slurm/power.log"
GUARD_LOG = "/var/log/slurm/suspendguard.log"  # the wrappers' guard output, on each machine
NODE = "/dev/sg-slurm/accel0"  # the compute nodes' test device (/run is nodev in there)
NODE_RDEV = "1 7"
MARKER = "/run/suspendguard-test/signals.log"
HEALTH_OFF = "/run/suspendguard-test/health-off"
SYNC_UNIT = "sg-slurm-sync"
NPU_SMI = "/opt/sg/npu-smi"
NPU_INFO = "/opt/sg/npu-smi-info.txt"  # what the stand-in npu-smi prints: swap to change health
HEALTHY = FIXTURES / "npu-smi" / "310-atlas300i-idle.txt"
PREFIX = "10.77.0"
# What Slurm logs on every start or reconfigure here that says nothing about the test:
# no PMIx library, and slurm.conf's hash differs while the exclusion file does.
NOISE = re.compile(r"pmix|PMIx|MPI: Cannot create context|different slurm\.conf|"
                   r"select/cons_tres|mcs|backup_controller|memory enforcing|"
                   r"SchedulerParameters")


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    address: str
    port: int | None = None  # slurmd's, on a compute node


MACHINES = (Machine("ctl", f"{PREFIX}.1"), Machine("node1", f"{PREFIX}.2", 6818),
            Machine("node2", f"{PREFIX}.3", 6819))
NODES = tuple(m.name for m in MACHINES if m.port is not None)


# How the controller runs the guard on a node ([slurm] remote): as SlurmUser, whose home
# does not exist, so nothing may need ~/.ssh.
REMOTE = ["/usr/bin/ssh", "-i", KEY, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
          "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", "root@{node}"]


def critical(text: str) -> str:
    """An npu-smi info recording with each chip's Health OK made Critical, columns kept."""
    return re.sub(r"\| OK( +)\|", lambda m: "| Critical" + " " * (len(m.group(1)) - 6) + "|",
                  text)


def guard_config(python: str) -> str:
    """The guard's config on every machine: the test device, the stand-in npu-smi (family
    ascend, so the check after resume asks it), short drain limits, the [slurm] section."""
    return f"""[devices]
families = ["ascend"]
nodes = ["{NODE}"]

[idle]
backends = []
npu_smi = "{NPU_SMI}"

[drain]
timeout_s = 3.0
deadline_s = 20.0

[resume]
health_timeout_s = 10.0
ready_timeout_s = 3.0

[slurm]
remote = {json.dumps(REMOTE)}
guard = {json.dumps([python, "-m", "suspendguard"])}
scontrol = "/usr/bin/scontrol"
exclude_file = "{EXCLUDE}"
timeout_s = 60
resume_wait_s = 60
"""


def slurm_conf(*, suspend_time: int, suspend_timeout: int, resume_timeout: int,
               health_interval: int) -> str:
    nodes = "\n".join(f"NodeName={m.name} NodeAddr={m.address} Port={m.port} CPUs=1 "
                      "RealMemory=100" for m in MACHINES if m.port is not None)
    return f"""ClusterName=sg
SlurmctldHost=ctl({PREFIX}.1)
SlurmUser=slurm
SlurmctldPort=6817
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldParameters=power_save_interval=2
SuspendProgram=/etc/slurm/suspend.sh
ResumeProgram=/etc/slurm/resume.sh
SuspendTime={suspend_time}
SuspendTimeout={suspend_timeout}
ResumeTimeout={resume_timeout}
HealthCheckProgram=/etc/slurm/health.sh
HealthCheckInterval={health_interval}
HealthCheckNodeState=ANY
Include {EXCLUDE}
{nodes}
PartitionName=main Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def wrapper(python: str, verb: str) -> str:
    """SuspendProgram / ResumeProgram: one line in the power log, the guard, its exit status.

    Slurm runs it as SlurmUser with only SLURM_CONF in its environment, so
    each program is named by its path and no PATH is added: the guard gets
    what Slurm gives."""
    return f"""#!/bin/sh
echo "$(/usr/bin/date +%s.%N) {verb} $*" >> {POWER_LOG}
{python} -m suspendguard slurm {verb} "$@" >> {GUARD_LOG} 2>&1
rc=$?
echo "$(/usr/bin/date +%s.%N) {verb} $* exit $rc" >> {POWER_LOG}
exit $rc
"""


def health_wrapper(python: str) -> str:
    """HealthCheckProgram; a test turns it off on a node with the file HEALTH_OFF, so that
    a hold it shows comes from the SuspendProgram alone."""
    return f"""#!/bin/sh
[ -e {HEALTH_OFF} ] && exit 0
{python} -m suspendguard slurm health >> {GUARD_LOG} 2>&1
rc=$?
[ "$rc" = 0 ] || echo "$(/usr/bin/date +%s.%N) health exit $rc" >> {GUARD_LOG}
exit $rc
"""


def npu_smi_wrapper() -> str:
    """The stand-in npu-smi as the guard runs it (no FAKE_ variables in its environment)."""
    return f"""#!/bin/sh
export FAKE_NPU_SMI_INFO={NPU_INFO}
export FAKE_NPU_SMI_LOG=/var/log/sg-npu-smi.log
exec {FAKES / "idle" / "npu-smi"} "$@"
"""


# A node that slept stays asleep until Slurm wakes it: its slurmd must not answer (a
# sleeping machine's would not; here the fake sleep returns at once, and a slurmd still
# up re-registers at the next ``scontrol reconfigure``, which makes slurmctld take the
# node for awake). ``slurm resume``'s rejoin starts it again, as after a real wake.
ASLEEP_HOOK = """#!/bin/sh
[ "$1" = post ] && /usr/bin/systemctl stop --no-block slurmd.service
exit 0
"""


SSHD_CONFIG = """ListenAddress {address}
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
"""


def restart(box: Container, unit: str, tries: int = 3) -> None:
    """``systemctl restart UNIT``; failed ``tries`` times, the error carries the unit's
    journal and who listens where.

    The presets enabled the cluster's units, so each failed at boot (no config yet), may
    have hit its start limit, and may be restarting on its own: that is forgotten first."""
    for _ in range(tries):
        box.run("systemctl", "reset-failed", unit, check=False)
        got = box.run("systemctl", "restart", unit, check=False)
        if got.returncode == 0:
            return
        time.sleep(1)
    log = box.run("journalctl", "--no-pager", "-o", "cat", "-n", "30", "-u", unit,
                  check=False).stdout
    listening = box.run("ss", "-ltnp", check=False).stdout
    raise HarnessError(f"systemctl restart {unit} exited {got.returncode}: "
                       f"{got.stderr.strip()}\n{log}\n--- ss -ltnp:\n{listening}")


class SlurmCluster(BootsOnEnter):
    """Three booted containers in one network namespace; :meth:`close` ends all of it."""

    def __init__(self, repo: Path, *, suspend_time: int = 5, suspend_timeout: int = 15,
                 resume_timeout: int = 60, health_interval: int = 5) -> None:
        self.repo = repo
        self.netns = f"sg-slurm-{os.getpid()}-{secrets.token_hex(2)}"
        self.conf = slurm_conf(suspend_time=suspend_time, suspend_timeout=suspend_timeout,
                               resume_timeout=resume_timeout, health_interval=health_interval)
        self.suspend_time = suspend_time
        self.resume_timeout = resume_timeout
        self.boxes: dict[str, Container] = {}
        self.stack = contextlib.ExitStack()
        self.python = Container.python
        self.boot_s = 0.0
        self.made_netns = False

    # -- lifecycle ---------------------------------------------------------

    @property
    def ctl(self) -> Container:
        return self.boxes["ctl"]

    def node(self, name: str) -> Container:
        return self.boxes[name]

    def boot(self) -> None:
        began = time.monotonic()
        self._make_netns()
        with ThreadPoolExecutor(len(MACHINES)) as pool:
            booting = {m.name: pool.submit(self._boot_one, m.name) for m in MACHINES}
            self.boxes = {name: done.result() for name, done in booting.items()}
        munge_key = base64.b64encode(secrets.token_bytes(128)).decode()
        with ThreadPoolExecutor(len(MACHINES)) as pool:
            for done in [pool.submit(self._set_up, m, munge_key) for m in MACHINES]:
                done.result()
        self._set_up_ssh()
        self.boot_s = time.monotonic() - began

    def _boot_one(self, name: str, tries: int = 2) -> Container:
        """A booted container in the netns; a boot that did not finish is tried once more
        (seldom, a container's dbus finds no users at boot and logind then waits for it:
        the harness's flake, not the cluster's), and said (-s shows it)."""
        for attempt in range(1, tries + 1):
            box = Container(self.repo, masked=SLURM_MASKED, network_namespace=self.netns)
            self.stack.callback(box.close)
            try:
                box.boot()
                return box
            except HarnessError as exc:
                box.close()
                if attempt == tries:
                    raise
                print(f"{name}: boot {attempt} failed, booting again: {str(exc)[:300]}")
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.stack.close()
        self.boxes = {}
        if self.made_netns:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
            self.made_netns = False

    def _make_netns(self) -> None:
        ns = self.netns
        a, b = "sg0", "sg1"
        # close() deletes it, after the containers in it stopped
        steps = [["ip", "netns", "add", ns],
                  ["ip", "-n", ns, "link", "set", "lo", "up"],
                  ["ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b],
                  ["ip", "-n", ns, "addr", "add", f"{PREFIX}.1/24", "dev", a],
                  ["ip", "-n", ns, "addr", "add", f"{PREFIX}.2/24", "dev", b],
                  ["ip", "-n", ns, "addr", "add", f"{PREFIX}.3/24", "dev", b],
                  ["ip", "-n", ns, "link", "set", a, "up"],
                  ["ip", "-n", ns, "link", "set", b, "up"]]
        for argv in steps:
            got = subprocess.run(argv, capture_output=True, text=True, check=False)
            if got.returncode != 0:
                raise HarnessError(f"{' '.join(argv)} exited {got.returncode}: {got.stderr}")
            self.made_netns = True  # only one this made is deleted

    def _set_up(self, machine: Machine, munge_key: str) -> None:
        box = self.boxes[machine.name]
        hosts = "127.0.0.1 localhost\n" + "".join(f"{m.address} {m.name}\n" for m in MACHINES)
        box.write("/etc/hosts", hosts)
        box.write("/etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\n"
                                        "hosts: files\n")
        box.run("hostname", machine.name)
        box.sh(
            "set -e\n"
            f"groupadd -r -g {MUNGE_UID} munge\n"
            f"useradd -r -u {MUNGE_UID} -g munge -d /nonexistent -s /usr/sbin/nologin munge\n"
            f"groupadd -r -g {SLURM_UID} slurm\n"
            f"useradd -r -u {SLURM_UID} -g slurm -d /nonexistent -s /usr/sbin/nologin slurm\n"
            "mkdir -p /etc/alternatives\n"
            "for n in slurmctld slurmd slurmstepd; do\n"
            "    ln -sfn /usr/sbin/$n-wlm /etc/alternatives/$n\n"
            "done\n"
            "mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge\n"
            f"echo {munge_key} | base64 -d > /etc/munge/munge.key\n"
            "chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge\n"
            "chmod 700 /etc/munge /var/lib/munge /var/log/munge\n"
            "chmod 400 /etc/munge/munge.key\n"
            "mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /etc/slurm\n"
            "chown -R slurm:slurm /var/lib/slurm /var/log/slurm\n"
            # the test venv's interpreter lives under /root/.pyenv on some hosts: SlurmUser
            # must be able to reach it
            "chmod 755 /root\n"
        )
        box.write("/etc/slurm/slurm.conf", self.conf)
        # A missing Include file is fatal for every Slurm command: it exists from the start,
        # holding one comment line (an empty one is warned about).
        box.write(EXCLUDE, "# suspendguard: no node excluded\n")
        box.run("chown", "slurm:slurm", EXCLUDE)
        box.write("/etc/suspendguard/config.toml", guard_config(self.python))
        if machine.port is None:
            box.write("/etc/slurm/suspend.sh", wrapper(self.python, "suspend"), 0o755)
            box.write("/etc/slurm/resume.sh", wrapper(self.python, "resume"), 0o755)
            box.sh(f": > {POWER_LOG} && : > {GUARD_LOG} && "
                   f"chown slurm:slurm {POWER_LOG} {GUARD_LOG}")
        else:
            box.write("/etc/default/slurmd", f'SLURMD_OPTIONS="-N {machine.name}"\n')
            box.write("/etc/slurm/health.sh", health_wrapper(self.python), 0o755)
            box.sh(f": > {GUARD_LOG}")
            box.make_node(NODE, NODE_RDEV, str(Path(MARKER).parent), "/opt/sg")
            box.write(NPU_SMI, npu_smi_wrapper(), 0o755)
            self.set_npu_health(machine.name, healthy=True)
            box.install(guard_config(self.python))
            box.add_hook("sg-slurm-asleep", ASLEEP_HOOK)

    def _set_up_ssh(self) -> None:
        ctl = self.ctl
        ctl.sh(f"set -e; mkdir -p {Path(KEY).parent}; rm -f {KEY} {KEY}.pub; "
               f"ssh-keygen -q -t ed25519 -N '' -C suspendguard-test -f {KEY}; "
               f"chown slurm:slurm {KEY}; chmod 600 {KEY}")
        public = ctl.run("cat", f"{KEY}.pub").stdout
        for m in MACHINES:
            if m.port is None:
                continue
            box = self.boxes[m.name]
            # the preset enabled it: it failed at boot, and may be restarting
            box.run("systemctl", "stop", "ssh.service", "ssh.socket", check=False)
            box.sh("set -e\n"
                   "useradd -r -d /run/sshd -s /usr/sbin/nologin sshd\n"
                   "mkdir -p /etc/ssh /run/sshd /root/.ssh && chmod 700 /root/.ssh\n"
                   "ssh-keygen -q -A\n"
                   # sshd without PAM refuses a locked account ('!' in shadow)
                   "usermod -p '*' root\n")
            box.write("/etc/ssh/sshd_config", SSHD_CONFIG.format(address=m.address))
            box.write("/root/.ssh/authorized_keys", public, 0o600)
            box.run("/usr/sbin/sshd", "-t")  # a bad setting: its own words in the error
            restart(box, "ssh.service")

    # -- daemons ---------------------------------------------------------------

    def start_daemons(self, timeout: float = 90.0) -> None:
        """munge everywhere, slurmctld, the slurmds; back once both nodes are idle."""
        for box in self.boxes.values():
            restart(box, "munge.service")
        restart(self.ctl, "slurmctld.service")
        self.wait(lambda: self.ctl.run("scontrol", "ping", check=False).returncode == 0
                  and "UP" in self.ctl.run("scontrol", "ping", check=False).stdout, 60,
                  "slurmctld does not answer")
        for name in NODES:
            restart(self.node(name), "slurmd.service")

    def wait_registered(self, names: Iterable[str] = NODES, timeout: float = 90.0,
                        want: Callable[[str], bool] = lambda s: s.startswith("IDLE")) -> None:
        for name in names:
            self.wait(lambda n=name: want(self.node_state(n)), timeout,  # type: ignore[misc]
                      f"{name} did not register")

    def set_health(self, name: str, on: bool) -> None:
        """Turn node ``name``'s HealthCheckProgram on or off (off: it exits 0 at once)."""
        self.node(name).sh(f"rm -f {HEALTH_OFF}" if on else f": > {HEALTH_OFF}")

    def start_sync(self, interval: int = 3) -> None:
        """``slurm sync`` on the controller every ``interval`` s, as root, as the shipped
        timer does every 30 s (its unit runs /usr/bin/suspendguard, not in the containers)."""
        self.ctl.run("systemd-run", f"--unit={SYNC_UNIT}", "--on-active=1",
                     f"--on-unit-active={interval}", "--timer-property=AccuracySec=100ms",
                     "-p", "SyslogIdentifier=suspendguard-slurm-sync",
                     self.python, "-m", "suspendguard", "slurm", "sync")

    def set_ctl_slurm(self, extra: str) -> None:
        """The controller's guard config with ``extra`` lines added to its [slurm] section."""
        # By a rename: a SuspendProgram starting meanwhile must not read half a file (an
        # empty one is a valid config of defaults, whose remote has no key).
        self.ctl.write("/etc/suspendguard/config.toml.new", guard_config(self.python) + extra)
        self.ctl.run("mv", "/etc/suspendguard/config.toml.new", "/etc/suspendguard/config.toml")

    def exclude_text(self) -> str:
        return self.ctl.run("cat", EXCLUDE, check=False).stdout

    # -- what the cluster says ---------------------------------------------------

    def node_state(self, name: str) -> str:
        """``scontrol show node -o NAME``'s State= (e.g. "IDLE+DRAIN+POWERED_DOWN")."""
        out = self.ctl.run("scontrol", "show", "node", "-o", name, check=False).stdout
        found = re.search(r"\bState=(\S+)", out)
        return found.group(1) if found else ""

    def node_field(self, name: str, field: str) -> str:
        out = self.ctl.run("scontrol", "show", "node", "-o", name, check=False).stdout
        found = re.search(rf"\b{field}=(.*?)(?= \w+=|$)", out.strip())
        return found.group(1) if found else ""

    def sinfo_reasons(self) -> dict[str, str]:
        """Each node with a reason (drained, down) and that reason."""
        out = self.ctl.run("sinfo", "-R", "-h", "-o", "%n|%E", check=False).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def sinfo(self) -> str:
        return self.ctl.run("sinfo", "-N", "-o", "%N %T %E", check=False).stdout

    def power_log(self) -> list[str]:
        return self.ctl.run("cat", POWER_LOG, check=False).stdout.splitlines()

    def calls(self, verb: str, name: str) -> list[str]:
        """The power log's calls of ``verb`` (suspend, resume) whose hostlist names ``name``."""
        out = []
        for line in self.power_log():
            parts = line.split()
            if len(parts) == 3 and parts[1] == verb and name in self.hostnames(parts[2]):
                out.append(line)
        return out

    def hostnames(self, hostlist: str) -> list[str]:
        got = self.ctl.run("scontrol", "show", "hostnames", hostlist, check=False)
        return got.stdout.split()

    def submit(self, *args: str) -> int:
        """``sbatch ARGS`` as root on ctl (in /tmp, its output there too); the job id."""
        out = self.ctl.run("sbatch", "--parsable", "--chdir=/tmp", "-o", "/tmp/slurm-%j.out",
                           *args).stdout
        return int(out.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        out = self.ctl.run("scontrol", "show", "job", "-o", str(job), check=False).stdout
        found = re.search(r"\bJobState=(\S+)", out)
        return found.group(1) if found else ""

    def job(self, job: int) -> str:
        return self.ctl.run("scontrol", "show", "job", str(job), check=False).stdout

    def set_npu_health(self, name: str, healthy: bool) -> None:
        text = HEALTHY.read_text()
        self.node(name).write(NPU_INFO, text if healthy else critical(text))

    def account(self, lines: int = 40) -> str:
        """What the cluster says now: sinfo, nodes, the power log, each machine's logs."""
        parts = [f"--- sinfo:\n{self.sinfo()}",
                 f"--- reasons: {self.sinfo_reasons()}",
                 "--- power.log:\n" + "\n".join(self.power_log()[-lines:])]
        for name in NODES:
            parts.append(f"--- scontrol show node {name}:\n"
                         + self.ctl.run("scontrol", "show", "node", name, check=False).stdout)
        for name, box in self.boxes.items():
            for path in (GUARD_LOG, "/var/log/slurm/slurmctld.log" if name == "ctl"
                         else "/var/log/slurm/slurmd.log"):
                text = box.run("tail", "-n", str(3 * lines), path, check=False).stdout
                kept = [line for line in text.splitlines() if not NOISE.search(line)]
                parts.append(f"--- {name}:{path}:\n" + "\n".join(kept[-lines:]))
            tags = (("suspendguard-slurm", "suspendguard-slurm-sync") if name == "ctl"
                    else ("suspendguard", "systemd-sleep", "systemd-logind"))
            for tag in tags:
                parts.append(f"--- {name} journal -t {tag}:\n" + box.run(
                    "journalctl", "--no-pager", "-o", "short-monotonic", "-n", str(lines // 2),
                    "-t", tag, check=False).stdout)
            parts.append(f"--- {name} /sys/power/state: {box.power_state().split()[:1]}")
        return "\n".join(parts)

    def wait(self, predicate: Callable[[], object], timeout: float, what: str,
             interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {timeout:g} s:\n{self.account()}")
            time.sleep(interval)
