"""The built-in launcher kinds: how each is told by its command line, and how it is stopped.

Each kind's stop mode (guard/jobs.py says what each does): ``forward`` (it
gets the one signal and passes it on to its ranks), ``hold`` (stopped while
its ranks get the signal from the guard), ``ranks`` (left alone, its ranks
signalled). A kind told by its command line alone may be adjusted once its
ranks are seen (guard/jobs.py's ``_agent``): ``accelerate launch`` that
started several ranks is torchrun's agent; ``python -m
torch.distributed.launch`` whose ranks lack the elastic agent's
``TORCHELASTIC_RUN_ID`` is the launcher of torch before 1.9, which does not
forward.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from suspendguard.guard.python_argv import python_runs


@dataclass(frozen=True, slots=True)
class LauncherKind:
    name: str  # "torchrun", "mpirun", ... or the rule's name
    stop: str  # "forward", "hold" or "ranks"
    restarts: str = ""  # what it does when a rank leaves first, in the reason's words


# How long torchrun's elastic agent waits for its ranks after it forwarded a signal before
# it SIGKILLs them (torch.distributed.elastic's default).
AGENT_KILL_S = 30.0
_TORCHRUN = ("SIGTERMs the other ranks when one fails, SIGKILLs ranks "
             f"{AGENT_KILL_S:g} s after it forwarded a signal")

# Each built-in kind: its name, how it is told (argv), how it is stopped.
_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torch-launch",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "mindspore.parallel.cluster.run": "msrun",
}
_SCRIPTS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "msrun": "msrun"}
_MPI = {"mpirun", "mpiexec", "orterun", "prterun", "mpirun.openmpi", "mpiexec.openmpi",
        "mpiexec.hydra", "mpirun.mpich", "mpiexec.mpich"}
BUILTIN: dict[str, LauncherKind] = {
    "torchrun": LauncherKind("torchrun", "forward", _TORCHRUN),
    # ``python -m torch.distributed.launch`` of torch 1.9 and later: torchrun's agent. Told
    # apart from "torchrun" (its restarts), so that plan() can look at its ranks.
    "torch-launch": LauncherKind("torchrun", "forward",
                                 f"{_TORCHRUN} (torch.distributed.launch, torch 1.9 or later)"),
    # The same module before torch 1.9, its ranks without TORCHELASTIC_RUN_ID: a plain
    # Popen launcher. 1.7's and 1.8's SIGKILL every rank on SIGINT; older ones exit on it
    # and leave their ranks running. Held, so that it cannot kill a rank that is saving.
    "torch-launch-legacy": LauncherKind(
        "torch.distributed.launch", "hold",
        "SIGKILLs every rank on SIGINT and when one exits non-zero (torch 1.8, no elastic "
        "agent; older ones exit on SIGINT and leave their ranks running)"),
    "accelerate": LauncherKind("accelerate", "forward",
                               "runs torchrun's agent in its own process"),
    # ``accelerate launch`` of one process is a bare Popen().wait(): nothing
    # is forwarded, so its one rank gets the signal itself.
    "accelerate-single": LauncherKind("accelerate", "ranks",
                                      "waits for its one process and forwards nothing"),
    "deepspeed": LauncherKind("deepspeed", "hold",
                              "SIGTERMs every rank on SIGINT, and when one rank exits"),
    "msrun": LauncherKind("msrun", "hold", "SIGKILLs the other ranks when one exits non-zero"),
    "mpirun": LauncherKind("mpirun", "ranks", "turns SIGINT into SIGTERM for its ranks"),
}
# The kinds that run torchrun's elastic agent, which forwards to each rank it started (torch
# 1.13) or to each rank's process group (newer torch).
AGENTS = (BUILTIN["torchrun"], BUILTIN["torch-launch"], BUILTIN["accelerate"])


def builtin_kind(cmdline: Sequence[str], exe: str) -> LauncherKind | None:
    """The built-in launcher a command line runs, if any."""
    if not cmdline:
        return None
    names = [os.path.basename(exe), os.path.basename(cmdline[0])]
    if names[0].startswith("python") or names[1].startswith("python"):
        how, target, after = python_runs(cmdline[1:])
        if how == "-m":
            if target in _MODULES:
                return BUILTIN[_MODULES[target]]
            if target == "accelerate.commands.launch":
                return _accelerate(after)
            return None
        if how == "script":
            names.append(os.path.basename(target))
            words = [a for a in after if not a.startswith("-")]
            if os.path.basename(target) == "accelerate" and words[:1] == ["launch"]:
                return _accelerate(after[after.index("launch") + 1:])
    for name in names:
        if name in _SCRIPTS:
            return BUILTIN[_SCRIPTS[name]]
        if name in _MPI:
            return BUILTIN["mpirun"]
    if names[1] == "accelerate" and len(cmdline) > 1 and cmdline[1] == "launch":
        return _accelerate(cmdline[2:])
    return None


# The options that put ``accelerate launch`` on torchrun's agent, besides --num_processes above
# 1. Not --num_machines: accelerate picks its launcher without it, so one process per machine
# is still the bare wait (a multi-GPU host's processes, its default, are told by the job).
_ACCELERATE_MULTI = frozenset(("--multi_gpu", "--use_deepspeed", "--use_fsdp",
                               "--use_megatron_lm"))


# accelerate launch's options that take no value; any other takes the next word unless
# given as --key=value. Its first other word is the script, whose own options are its own.
# Spelled with underscores: accelerate takes each with hyphens too (_option).
_ACCELERATE_FLAGS = _ACCELERATE_MULTI | frozenset((
    "--cpu", "--tpu", "--ipex", "--use_xpu", "-m", "--module", "--no_python", "-q", "--quiet",
    "--debug", "-h", "--help", "--same_network", "--tpu_cluster", "--no_tpu_cluster",
    "--tpu_use_cluster", "--tpu_use_sudo", "--downcast_bf16", "--enable_cpu_affinity",
    "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--fp8_use_autocast_during_eval",
))


def _option(word: str) -> tuple[str, bool, str]:
    """An option of accelerate launch: its name with underscores, whether ``=`` gave its value,
    and that value."""
    key, eq, value = word.partition("=")
    if key.startswith("--"):
        key = "--" + key[2:].replace("-", "_")
    return key, bool(eq), value


def _accelerate(args: Sequence[str]) -> LauncherKind:
    """torchrun's agent in-process for several processes; a bare wait for one. ``args``:
    those after ``launch``, the script's own included."""
    multi = cpu = False
    i = 0
    while i < len(args) and args[i].startswith("-"):
        key, eq, value = _option(args[i])
        if not eq and key not in _ACCELERATE_FLAGS:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        multi = multi or key in _ACCELERATE_MULTI or (
            key == "--num_processes" and value.isdigit() and int(value) > 1)
        cpu = cpu or key == "--cpu"
        i += 1
    # Each of accelerate's multi-process paths is taken only without --cpu: with it, whatever
    # else is asked, the bare wait.
    return BUILTIN["accelerate" if multi and not cpu else "accelerate-single"]
