"""Ascend device logs: read them, match the documented failures, report them.

- ``reader``: log lines -> records (level, module, pid, time, message);
- ``rules``: the catalog of documented failures and every known wording;
- ``scan``: where the logs are, and reading them safely (they are untrusted);
- ``command``: ``suspendguard logs``;
- ``after``: the after-resume check the sleep hook runs.
"""

from __future__ import annotations

from suspendguard.logs.finding import Finding

__all__ = ["Finding"]
