"""What a cgroup path names: the systemd unit that runs a process, and its container."""

from __future__ import annotations

import re

_CONTAINER_PATTERNS = (
    (re.compile(r"docker-([0-9a-f]{12})[0-9a-f]*\.scope"), "docker"),
    (re.compile(r"/docker/([0-9a-f]{12})"), "docker"),
    (re.compile(r"libpod-([0-9a-f]{12})[0-9a-f]*\.scope"), "podman"),
    (re.compile(r"cri-containerd-([0-9a-f]{12})[0-9a-f]*\.scope"), "containerd"),
    (re.compile(r"crio-([0-9a-f]{12})[0-9a-f]*\.scope"), "cri-o"),
    (re.compile(r"machine-([^/]+)\.scope"), "machine"),
    (re.compile(r"systemd-nspawn@([^/]+)\.service"), "nspawn"),
)


def unit_and_container(cgroup: str | None) -> tuple[str | None, str | None]:
    """The innermost systemd unit of this host's manager, and the container (kind:id), of a
    cgroup path: a unit a container or machine names inside its own cgroup is its own."""
    if not cgroup:
        return None, None
    container, upto = None, len(cgroup)
    found = [(m, kind) for pattern, kind in _CONTAINER_PATTERNS if (m := pattern.search(cgroup))]
    if found:  # the outermost: what is inside it is its own to name
        m, kind = min(found, key=lambda f: f[0].start())
        container = f"{kind}:{m.group(1)}"
        end = cgroup.find("/", m.end())
        upto = end if end >= 0 else len(cgroup)
    unit = None
    for part in cgroup[:upto].strip("/").split("/"):
        if part.endswith((".service", ".scope")):
            unit = part
    if container is None and "/kubepods" in cgroup:
        container = "kubernetes:" + cgroup.rstrip("/").rsplit("/", 1)[-1][:24]
    return unit, container
