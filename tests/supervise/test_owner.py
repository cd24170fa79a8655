"""Owners read off real cgroup path formats, as each supervisor names its cgroups.

The paths are the forms the supervisors write (a /proc/PID/cgroup line's
path): Docker with its cgroupfs and systemd drivers, Podman rootful and
rootless, containerd and CRI-O pods under the kubelet's systemd and cgroupfs
drivers, systemd system and user services, login sessions.
"""

from __future__ import annotations

import pytest

from suspendguard.model import Owner
from suspendguard.supervise.owner import owner_of_cgroup

CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
POD = "1d2c3b4a-5f6e-4788-99aa-bbccddeeff00"


@pytest.mark.parametrize(("cgroup", "kind", "name"), [
    ("/system.slice/infer.service", "systemd-service", "infer.service"),
    ("/system.slice/system-infer.slice/infer@3.service", "systemd-service", "infer@3.service"),
    ("/user.slice/user-1000.slice/session-4.scope", "plain", ""),
    ("/system.slice/run-r1b2c3.scope", "plain", ""),  # systemd-run --scope: nobody restarts it
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/infer.service",
     "user-service", "infer.service"),
    ("/user.slice/user-1000.slice/user@1000.service/init.scope", "plain", ""),
    # Docker, systemd cgroup driver, and cgroupfs driver (v2 and the v1 name=systemd line)
    (f"/system.slice/docker-{CID}.scope", "docker", CID),
    (f"/docker/{CID}", "docker", CID),
    # Podman: rootful (with its init sub-cgroup), rootless, and the cgroupfs manager
    (f"/machine.slice/libpod-{CID}.scope/container", "podman", CID),
    # ... but rootless, in a user's own tree, is the user's: drained as a process, never
    # through root's engine, whose container of that id it is not
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope",
     "plain", ""),
    (f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{CID}.scope",
     "plain", ""),
    (f"/user.slice/user-1000.slice/user@1000.service/app.slice/docker/{CID}/x.service",
     "user-service", "x.service"),
    # ... even nested in a scope the user named as a machine's
    (f"/user.slice/user-1000.slice/user@1000.service/app.slice/machine-x.scope/docker-{CID}.scope",
     "plain", ""),
    # A user manager inside a machine is the machine's
    ("/machine.slice/systemd-nspawn@box.service/payload/user.slice/user-1000.slice/"
     "user@1000.service/app.slice/a.service", "plain", ""),
    (f"/libpod_parent/libpod-{CID}", "podman", CID),
    # Kubernetes: containerd and CRI-O, the kubelet's systemd driver (uid with _)
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD.replace('-', '_')}"
     f".slice/cri-containerd-{CID}.scope", "kubernetes", POD),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}"
     f".slice/crio-{CID}.scope", "kubernetes", POD),
    (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope",
     "kubernetes", POD),  # a Guaranteed pod has no QoS slice
    # ... and the cgroupfs driver
    (f"/kubepods/besteffort/pod{POD}/{CID}", "kubernetes", POD),
    (f"/kubepods/pod{POD}/{CID}", "kubernetes", POD),
    # A unit inside an nspawn machine is that machine's manager's, not ours
    ("/machine.slice/systemd-nspawn@box.service/payload/system.slice/infer.service", "plain", ""),
    ("/", "plain", ""),
    ("", "plain", ""),
])
def test_owner_of_real_cgroup_paths(cgroup: str, kind: str, name: str) -> None:
    owner = owner_of_cgroup(cgroup)
    assert (owner.kind, owner.name) == (kind, name)


def test_user_service_names_its_manager() -> None:
    owner = owner_of_cgroup("/user.slice/user-1001.slice/user@1001.service/app.slice/a.service")
    assert owner.uid == 1001 and owner.key == "user-service:1001:a.service"


def test_pod_container_is_named_in_the_note() -> None:
    owner = owner_of_cgroup(f"/kubepods/besteffort/pod{POD}/{CID}")
    assert owner.note == f"container {CID[:12]}"
    assert owner.restarts  # the kubelet restarts a pod's container whatever it exits with


@pytest.mark.parametrize(("owner", "restarts"), [
    (Owner("systemd-service", "a.service", restart="always"), True),
    (Owner("systemd-service", "a.service", restart="on-failure"), True),
    (Owner("systemd-service", "a.service", restart="no"), False),
    (Owner("systemd-service", "a.service"), True),  # not read: it may
    (Owner("user-service", "a.service", uid=1000), True),
    (Owner("docker", CID, restart="unless-stopped"), True),
    (Owner("docker", CID, restart="no"), False),
    (Owner("plain"), False),
])
def test_restarts(owner: Owner, restarts: bool) -> None:
    assert owner.restarts is restarts


def test_describe_and_json() -> None:
    owner = Owner("docker", CID, restart="always")
    assert owner.describe() == f"Docker container {CID[:12]} (restart always)"
    assert owner.to_json()["kind"] == "docker" and owner.key == f"docker:{CID}"
