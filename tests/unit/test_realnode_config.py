"""The real node's configuration files: valid, and keeping every path the node writes under its own folder."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ringleader_devcluster import realnode
from ringleader_devcluster.layout import Layout

PATHS = realnode.Paths.of(Layout(cache=Path("/c"), state=Path("/s/.dev")))


def test_containerd_config_keeps_its_state_under_the_node_folder_and_fits_this_machine() -> None:
    config = tomllib.loads(realnode.containerd_config(PATHS))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert all(Path(p).is_relative_to(PATHS.root) for p in (config["root"], config["state"], config["grpc"]["address"]))
    assert Path(runc["options"]["Root"]).is_relative_to(PATHS.root)
    assert Path(cri["cni"]["conf_dir"]).is_relative_to(PATHS.root)
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["restrict_oom_score_adj"] is True  # root here lacks CAP_SYS_RESOURCE
    assert runc["options"]["SystemdCgroup"] is False and cri["sandbox_image"] == realnode.PAUSE_IMAGE


def test_cni_leases_stay_under_the_node_folder() -> None:
    bridge = realnode.cni_config(PATHS)["plugins"][0]  # type: ignore[index]
    assert bridge["bridge"] == realnode.BRIDGE and not bridge["ipMasq"]
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(PATHS.root)
    assert bridge["ipam"]["ranges"] == [[{"subnet": realnode.POD_CIDR}]]


def test_kubelet_config_authenticates_callers_and_is_tainted() -> None:
    config = realnode.kubelet_config(PATHS, "192.0.2.2", Path("/ca.crt"))
    assert config["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": "/ca.crt"},
    }
    assert config["authorization"] == {"mode": "Webhook"} and config["readOnlyPort"] == 0
    assert config["registerWithTaints"] == [{"key": realnode.TAINT, "effect": "NoSchedule"}]
    assert (config["cgroupDriver"], config["failCgroupV1"]) == ("cgroupfs", False)
    assert Path(str(config["podLogsDir"])).is_relative_to(PATHS.root)
