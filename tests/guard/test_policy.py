"""Policy over plain holder records: every action, the rule that decided it, and what follows."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from suspendguard.config import DrainRule, EscalationStep, PolicyConfig, Rule, defaults
from suspendguard.guard.identity import Vouched
from suspendguard.guard.policy import ancestors, decide, forgeable_rule_warnings
from suspendguard.model import Decision, HeldNode, Holder, Node, SignalMasks, holder_id

CAUGHT = SignalMasks(caught=1 << 1)  # a SIGINT handler
COMPUTE = Node("/dev/davinci0", "ascend", "compute", ("char", 1))
MANAGER = Node("/dev/davinci_manager", "ascend", "management", ("char", 2))


def holder(pid: int = 4242, comm: str = "python3", cmdline: tuple[str, ...] = ("python3", "train.py"),
           nodes: tuple[Node, ...] = (COMPUTE,), user: str = "alice", unit: str | None = None,
           exe: str = "/usr/bin/python3.10", source: str = "proc", frozen: bool = False,
           masks: SignalMasks = CAUGHT) -> Holder:
    return Holder(pid=pid, start_time=1, ppid=1, uid=1000, user=user, comm=comm, exe=exe,
                  cmdline=cmdline, unit=unit, container=None, nspid=(pid,),
                  nodes=tuple(HeldNode(n, n.path, "fd") for n in nodes), sigint="caught",
                  frozen=frozen, source=source, sig_masks=masks)


NO_RULES = PolicyConfig((), (), "veto", ())
DRAIN = defaults().drain
DEAF = SignalMasks(ignored=1 << 1)  # SIGINT inherited as ignored


def action(h: Holder, policy: PolicyConfig = NO_RULES,
           never: frozenset[int] = frozenset()) -> tuple[str, str]:
    [d] = decide([h], policy, DRAIN, never_pids=never)
    return d.action, d.rule


def decision(h: Holder, on_sigint_ignored: str = "veto", escalate: tuple[EscalationStep, ...] = (),
             **kw: object) -> Decision:
    drain = replace(DRAIN, on_sigint_ignored=on_sigint_ignored, escalate=escalate)
    [d] = decide([h], NO_RULES, drain, **kw)  # type: ignore[arg-type]
    return d


def test_compute_holder_is_drained() -> None:
    assert action(holder()) == ("drain", "holds a compute node")


def test_management_only_is_ignored() -> None:
    assert action(holder(comm="npu-smi", nodes=(MANAGER,)))[0] == "ignore"


def test_rules_need_every_field() -> None:
    rule = Rule(comm="python3", user="bob")
    assert action(holder(), PolicyConfig((rule,), (), "veto", ()))[0] == "drain"
    rule = Rule(comm="python3", user="alice", exe="/usr/bin/python3*", cmdline=r"train\.py",
                unit="*.service")
    assert action(holder(unit="train.service"), PolicyConfig((rule,), (), "veto", ()))[0] == "protect"
    assert action(holder(unit="session-3.scope"), PolicyConfig((rule,), (), "veto", ()))[0] == "drain"


def test_an_exe_rule_still_matches_a_binary_upgraded_while_it_runs() -> None:
    # dpkg or pip replaced it: /proc/PID/exe reads "PATH (deleted)", and a protected job
    # was sent SIGINT.
    protect = PolicyConfig((Rule(uid=1000, exe="/opt/sim/bin/solver"),), (), "veto", ())
    running = holder(exe="/opt/sim/bin/solver (deleted)")
    assert action(running, protect)[0] == "protect"
    assert action(holder(exe="/opt/sim/bin/other (deleted)"), protect)[0] == "drain"


def test_protect_wins_over_ignore_and_names_the_rule() -> None:
    both = PolicyConfig((Rule(comm="python3"),), (Rule(comm="python3"),), "veto", ())
    assert action(holder(), both) == ("protect", "[policy] protect #1 (comm='python3')")


def test_never_pid1_and_the_guard_whatever_the_rules() -> None:
    rules = PolicyConfig((), (Rule(comm="python3"),), "veto", ())
    assert action(holder(pid=1), rules)[0] == "never"
    assert action(holder(pid=77), rules, frozenset({77}))[0] == "never"


def test_driver_daemons_and_own_probe_are_ignored_only_when_vouched_for() -> None:
    daemon = holder(comm="nvidia-persiste", exe="/usr/bin/nvidia-persistenced", user="root")
    probe = holder(cmdline=("/usr/bin/python3", "-m", "suspendguard.idle.acl_probe"))
    vouched = Vouched({holder_id(daemon): ""}, frozenset({holder_id(probe)}))
    [d, p] = decide([daemon, probe], NO_RULES, DRAIN, vouched=vouched)
    assert (d.action, d.rule, d.kind) == \
        ("ignore", "built-in: nvidia driver daemon nvidia-persistenced", "leave")
    assert p.action == "ignore" and p.rule.startswith("suspendguard's own short-lived pyACL")
    # Not vouched for: the name and the command line alone earn nothing.
    [d, p] = decide([daemon, probe], NO_RULES, DRAIN)
    assert (d.action, d.kind) == ("drain", "drain")
    assert d.notes == ("named nvidia-persistenced, but not checked: not exempt",)
    assert (p.action, p.kind) == ("drain", "drain")
    assert p.notes == ("its command line names suspendguard.idle.acl_probe, but its parent "
                       "(pid 1) is no suspendguard run on this state folder: not exempt",)
    doubt = "named slogd, but run by nobody from /tmp/x/slogd (...): not exempt"
    named = holder(comm="slogd", exe="/tmp/x/slogd", user="nobody")
    [n] = decide([named], NO_RULES, DRAIN, vouched=Vouched({holder_id(named): doubt}))
    assert (n.action, n.notes) == ("drain", (doubt,))


def test_rule_on_uid() -> None:
    assert action(holder(), PolicyConfig((Rule(uid=1000),), (), "veto", ())) == \
        ("protect", "[policy] protect #1 (uid=1000)")
    assert action(holder(), PolicyConfig((Rule(uid=0),), (), "veto", ()))[0] == "drain"
    assert action(holder(), PolicyConfig((), (Rule(uid=1000, comm="python3"),), "veto", ()))[0] == \
        "ignore"


def test_rules_on_a_name_alone_are_named_as_forgeable() -> None:
    by_name = PolicyConfig((Rule(comm="python3"), Rule(cmdline="train", uid=1000)),
                           (Rule(exe="/usr/bin/x"), Rule(cmdline="exporter")), "veto", ())
    assert forgeable_rule_warnings(by_name) == [
        "[policy] protect #1 (comm='python3') matches by name or command line alone, which any "
        "user's process can set: any user can veto every suspend with it; add uid, user, unit "
        "or exe",
        "[policy] ignore #2 (cmdline='exporter') matches by name or command line alone, which "
        "any user's process can set: any user's job can match it and run on through the "
        "suspend; add uid, user, unit or exe"]
    [d] = decide([holder()], by_name, DRAIN)
    assert d.notes == ("the rule that protects it matches by name or command line alone, "
                       "which any user's process can set",)
    [d] = decide([holder(comm="other")], by_name, DRAIN)
    assert d.action == "protect" and d.notes == ()


GPU = Node("/dev/nvidia0", "nvidia", "graphics", ("char", 3))
CTL = Node("/dev/nvidiactl", "nvidia", "management", ("char", 4))
MODESET = Node("/dev/nvidia-modeset", "nvidia", "management", ("char", 5))
UVM = Node("/dev/nvidia-uvm", "nvidia", "compute", ("char", 6))


def test_nvidia_graphics_client_is_kept_cuda_work_is_drained() -> None:
    [xorg] = decide([holder(comm="Xorg", nodes=(GPU, CTL, MODESET))], NO_RULES, DRAIN)
    assert (xorg.action, xorg.kind, xorg.signals, xorg.vetoes) == ("keep", "leave", False, False)
    assert xorg.rule.startswith("graphics client: holds NVIDIA nodes but not /dev/nvidia-uvm")
    assert action(holder(nodes=(GPU, CTL, UVM))) == ("drain", "holds a compute node")
    assert action(holder(nodes=(CTL,)))[0] == "ignore"


def test_device_reported_process_without_nodes_is_drained() -> None:
    assert action(holder(nodes=(), source="npu-smi")) == \
        ("drain", "reported by the device (npu-smi)")


def test_what_follows_before_any_signal() -> None:
    assert decision(holder()).kind == "drain"
    protect = decide([holder()], PolicyConfig((Rule(comm="python3"),), (), "veto", ()), DRAIN)[0]
    assert protect.kind == "protect" and protect.vetoes
    assert protect.reason == "pid 4242 python3 is protected by [policy] protect #1 " \
        "(comm='python3'): veto while it runs; stop it before suspending, or change the rule"
    assert "waits" not in protect.reason
    assert decision(holder(nodes=(MANAGER,))).kind == "leave"


def test_frozen_holder_vetoes() -> None:
    frozen = decision(holder(frozen=True))
    assert frozen.kind == "veto-frozen" and "cannot exit until thawed" in frozen.reason
    assert frozen.vetoes and not frozen.signals


def test_holder_ignoring_sigint_by_on_sigint_ignored() -> None:
    deaf = holder(masks=DEAF)
    vetoed = decision(deaf)
    assert vetoed.kind == "veto-sigint-ignored" and "kill -2 cannot stop it" in vetoed.reason
    # SigIgn cannot say who set it: both causes are named, then the next step.
    assert "(set by the program, or inherited from a parent that ignored it, e.g. `&` in a " \
        "script or nohup)" in vetoed.reason
    assert vetoed.reason.endswith("stop it yourself (kill -TERM 4242), start it so it takes "
                                  "SIGINT, or set [drain] on_sigint_ignored")
    empty = decision(deaf, "escalate")
    assert empty.kind == "veto-sigint-ignored"
    assert empty.reason.endswith('[drain] escalate is empty: add steps such as "SIGTERM:10"')
    steps = (EscalationStep("SIGTERM", 5.0),)
    assert decision(deaf, "escalate", steps).kind == "escalate"
    assert decision(deaf, "signal-anyway").kind == "drain"


def test_a_decision_carries_the_drain_signal_and_the_first_matching_rules_wait() -> None:
    """The policy decides a holder's wait once: the first [[policy.drain]] rule that matches
    it, or [drain] timeout_s; the drain, the prediction and the veto's advice read it there."""
    rules = (DrainRule(Rule(uid=1000, exe="/usr/bin/python3*"), 90.0),
             DrainRule(Rule(uid=1000), 45.0))
    policy = replace(NO_RULES, drain=rules)
    drain = replace(DRAIN, signal="SIGTERM", timeout_s=12.0)
    trainer, tool, other = holder(pid=1), holder(pid=2, exe="/opt/tool"), replace(holder(pid=3), uid=0)
    got = {d.holder.pid: (d.signal, d.wait_s) for d in decide([trainer, tool, other], policy, drain)}
    assert got == {1: ("SIGTERM", 90.0), 2: ("SIGTERM", 45.0), 3: ("SIGTERM", 12.0)}


def test_respawned_holders_say_so() -> None:
    h = holder(frozen=True)
    assert decision(h, respawned={(h.pid, h.start_time)}).reason.startswith(
        "pid 4242 python3 (respawned) is in a frozen cgroup")


def test_ancestors_are_the_chain_of_parents_up_to_pid_1() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = ancestors(os.getpid())
        assert {os.getpid(), os.getppid(), 1} <= mine
        assert child.pid not in mine  # below the guard, not above it
        assert ancestors(child.pid) == mine | {child.pid}
    finally:
        child.kill()
        child.wait()


def test_a_never_signalled_holder_of_a_compute_node_vetoes_and_one_of_management_nodes_not() -> None:
    [d] = decide([holder(pid=777)], NO_RULES, DRAIN, never_pids=frozenset({777}))
    assert d.kind == "veto-never" and not d.signals and d.veto().code == "unsignallable"
    [d] = decide([holder(pid=777, nodes=(MANAGER,))], NO_RULES, DRAIN,
                 never_pids=frozenset({777}))
    assert d.kind == "leave" and not d.vetoes
    # The guard's own process (an in-process device query) is never its own veto.
    [d] = decide([holder(pid=os.getpid())], NO_RULES, DRAIN, never_pids=frozenset({os.getpid()}))
    assert d.kind == "leave"
