"""``suspendguard doctor``: a read-only preflight of this host's suspend setup.

host.py reads the host's files under a root (``/``, or a fixture tree in
the tests); checks.py turns what it read into findings (finding.py), each
with its fix, and units.py checks the guard's own units.
Nothing here writes, signals or asks D-Bus.
"""
