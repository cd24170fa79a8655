"""The status report: its typed parts, how they are gathered, and two renderings (text, Prometheus)."""
