"""Ascend device logs: read them, match the documented failures, report them.

- ``entries``: log lines -> entries (level, module, pid, time, message);
- ``rules``: the catalog of documented failures and every known wording;
- ``codes``: the vendor's error codes (data/vendor-codes.toml), found by position;
- ``finding``: what a search reports: findings, and paths not read;
- ``globs``: the configured globs, filled in and matched;
- ``safe_open``: opening untrusted paths without following planted links;
- ``walk``: which files to read, newest first;
- ``reader``: one file's bytes searched for the catalog's needles;
- ``search``: all of it, in forked workers when there is much to read;
- ``journal``: a unit's journal (the job's own output), through journalctl;
- ``after``: the after-resume check the sleep hook runs;
- ``report``: what ``suspendguard logs`` reports, files and journals together.

The command's arguments and printing are ``suspendguard.commands.logs``.
"""
