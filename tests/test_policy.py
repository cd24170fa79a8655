"""Policy over plain holder records: every action and the rule that decided it."""

from __future__ import annotations

from suspendguard.config import PolicyConfig, Rule
from suspendguard.guard.policy import decide
from suspendguard.model import HeldNode, Holder, Node

COMPUTE = Node("/dev/davinci0", "ascend", "compute", ("char", 1))
MANAGER = Node("/dev/davinci_manager", "ascend", "management", ("char", 2))


def holder(pid: int = 4242, comm: str = "python3", cmdline: tuple[str, ...] = ("python3", "train.py"),
           nodes: tuple[Node, ...] = (COMPUTE,), user: str = "alice", unit: str | None = None,
           exe: str = "/usr/bin/python3.10", source: str = "proc") -> Holder:
    return Holder(pid=pid, start_time=1, ppid=1, uid=1000, user=user, comm=comm, exe=exe,
                  cmdline=cmdline, unit=unit, container=None, nspid=(pid,),
                  nodes=tuple(HeldNode(n, n.path, "fd") for n in nodes), sigint="caught",
                  source=source)


NO_RULES = PolicyConfig((), ())


def action(h: Holder, policy: PolicyConfig = NO_RULES,
           never: frozenset[int] = frozenset()) -> tuple[str, str]:
    [d] = decide([h], policy, never)
    return d.action, d.rule


def test_compute_holder_is_drained() -> None:
    assert action(holder()) == ("drain", "holds a compute node")


def test_management_only_is_ignored() -> None:
    assert action(holder(comm="npu-smi", nodes=(MANAGER,)))[0] == "ignore"


def test_rules_need_every_field() -> None:
    rule = Rule(comm="python3", user="bob")
    assert action(holder(), PolicyConfig((rule,), ()))[0] == "drain"
    rule = Rule(comm="python3", user="alice", exe="/usr/bin/python3*", cmdline=r"train\.py",
                unit="*.service")
    assert action(holder(unit="train.service"), PolicyConfig((rule,), ()))[0] == "protect"
    assert action(holder(unit="session-3.scope"), PolicyConfig((rule,), ()))[0] == "drain"


def test_protect_wins_over_ignore_and_names_the_rule() -> None:
    both = PolicyConfig((Rule(comm="python3"),), (Rule(comm="python3"),))
    assert action(holder(), both) == ("protect", "[policy] protect #1 (comm='python3')")


def test_never_pid1_and_the_guard_whatever_the_rules() -> None:
    rules = PolicyConfig((), (Rule(comm="python3"),))
    assert action(holder(pid=1), rules)[0] == "never"
    assert action(holder(pid=77), rules, frozenset({77}))[0] == "never"


def test_driver_daemons_and_own_probe_are_ignored() -> None:
    assert action(holder(comm="nvidia-persistenced"))[0] == "ignore"
    probe = holder(cmdline=("/usr/bin/python3", "-m", "suspendguard.idle.acl_probe"))
    assert action(probe)[0] == "ignore"


def test_device_reported_process_without_nodes_is_drained() -> None:
    assert action(holder(nodes=(), source="npu-smi")) == \
        ("drain", "reported by the device (npu-smi)")
