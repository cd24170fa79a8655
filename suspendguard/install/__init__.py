"""Installing the guard: the unit and hook templates, the manifest, the writes, and what is installed."""
