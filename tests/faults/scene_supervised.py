"""One real guard run with supervisors, as a process of its own that a fault test can SIGKILL.

    python scene_supervised.py CONFIG DROPIN_ROOT

The veto unit's run (pipeline.run with the owners' supervisors), except
that the drain drop-ins go under DROPIN_ROOT, not /run/systemd/system: the
test's fake systemd (DBUS_SYSTEM_BUS_ADDRESS) and fake engine (DOCKER_HOST)
are found in the environment the standard way. Prints the verdict as one
JSON line when it gets that far.
"""

from __future__ import annotations

import json
import os
import sys

from suspendguard.config import load
from suspendguard.guard.pipeline import run
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.log import Logger

config = load(sys.argv[1])
supervisors = ManagersAndEngines(dropin_root=sys.argv[2], environ=os.environ,
                          state_dir=config.state.dir)
report = run(config, dry_run=False, action="suspend", origin="unit", log=Logger(sys.stderr, {}),
             supervisors=supervisors, history=History.open)
print(json.dumps({"verdict": report.verdict.kind, "reasons": list(report.verdict.texts)}),
      flush=True)
