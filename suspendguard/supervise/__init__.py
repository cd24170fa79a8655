"""The owners' control: the systemd managers and the container engines that keep a holder's job down.

The guard finds a holder's owner in its cgroup (``owner``) and asks it,
through ``managers.ManagersAndEngines``, to stop the job, to keep it down
through the sleep and to start it again; what has to outlive the run is
written beside it (``dropin``, ``setaside``) and put back by the next one
when a run was killed (``leftovers``).
"""
