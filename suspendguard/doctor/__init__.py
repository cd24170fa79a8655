"""``suspendguard doctor``: a read-only preflight of this host's suspend setup.

host.py reads the host's files under a root (``/``, or a fixture tree in
the tests); checks.py turns what it read into findings, each with its fix.
Nothing here writes, signals or asks D-Bus.
"""
