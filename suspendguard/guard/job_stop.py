"""The drain's part of a job plan (guard/jobs.py): who is signalled, who forwards, who is held."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from suspendguard.guard.held import Held
from suspendguard.guard.jobs import Launcher
from suspendguard.model import HolderId


@dataclass(frozen=True, slots=True)
class JobStop:
    """How the jobs behind the holders are stopped (guard/jobs.py's plan, for the drain).

    ``quiet``: holders the guard does not signal, and why they leave all the
    same; ``forward``: launchers that get the signal instead of their ranks
    (the ranks named), which the guard signals itself should the launcher be
    gone; ``hold``: launchers stopped meanwhile through ``held``.
    """

    quiet: Mapping[HolderId, str] = field(default_factory=dict)
    forward: Sequence[tuple[Launcher, Sequence[HolderId]]] = ()
    hold: Sequence[Launcher] = ()
    held: Held | None = None
    # Holders asked to stop their own way instead of a signal (a Jupyter
    # kernel's shutdown_request): each call returns "" once asked, else why not.
    asks: Mapping[HolderId, Callable[[], str]] = field(default_factory=dict)
    asked_as: str = "a shutdown request"
    # The holders signalled that must leave before an ask is sent: a kernel's shutdown
    # SIGTERMs its process group's children at once, in their save (docs/ai-frameworks.md).
    after: Mapping[HolderId, frozenset[HolderId]] = field(default_factory=dict)
    # Holders an earlier attempt sent the signal and left running, quiet now: by attempt.
    earlier: Mapping[HolderId, int] = field(default_factory=dict)

    def due(self, key: HolderId, running: Collection[HolderId]) -> bool:
        """Whether the ask of ``key`` may go now: none it waits for is ``running``."""
        return not self.after.get(key, frozenset()) & set(running)


NO_JOBS = JobStop()
