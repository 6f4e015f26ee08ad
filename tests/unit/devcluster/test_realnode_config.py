"""The real node's configuration files: valid, and keeping every path the node writes under its own folder."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

from ringleader_devcluster import demo, images, realnode, realpods, servicenet
from ringleader_devcluster.layout import Layout

PATHS = realnode.Paths.of(Layout(cache=Path("/c"), state=Path("/s/.dev")))


def test_containerd_config_keeps_its_state_under_the_node_folder_and_fits_this_machine() -> None:
    config = tomllib.loads(realnode.containerd_config(PATHS))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert all(Path(p).is_relative_to(PATHS.root) for p in (config["state"], config["grpc"]["address"]))
    assert config["root"] == str(PATHS.image_store)  # images outlive a dev cluster, in the cache
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


def test_pods_resolve_through_the_kube_dns_service_which_maps_to_coredns_on_the_node() -> None:
    config = realnode.kubelet_config(PATHS, "192.0.2.2", Path("/ca.crt"))
    assert config["clusterDNS"] == [servicenet.DNS_SERVICE_IP]
    assert ipaddress.ip_address(servicenet.DNS_SERVICE_IP) in ipaddress.ip_network(servicenet.SERVICE_CIDR)
    objects = {o["kind"]: o for o in servicenet.api_objects("192.0.2.2")}
    service, slice_ = objects["Service"], objects["EndpointSlice"]
    assert service["spec"]["clusterIP"] == servicenet.DNS_SERVICE_IP and "selector" not in service["spec"]
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    # kube-proxy pairs a Service port with the slice's port of the same name and protocol
    by_name = {(p["name"], p["protocol"]): p["port"] for p in slice_["ports"]}
    assert {(p["name"], p["protocol"]) for p in service["spec"]["ports"]} == set(by_name)
    assert set(by_name.values()) == {servicenet.DNS_PORT}
    assert slice_["endpoints"] == [{"addresses": ["192.0.2.2"], "conditions": {"ready": True}}]


def test_coredns_reads_only_what_it_serves_and_listens_on_the_node_address() -> None:
    objects = {o["kind"]: o for o in servicenet.api_objects("192.0.2.2")}
    verbs = {v for rule in objects["ClusterRole"]["rules"] for v in rule["verbs"]}
    assert verbs == {"list", "watch"}
    assert objects["ClusterRoleBinding"]["subjects"][0]["name"] == "system:coredns"
    corefile = servicenet.corefile("192.0.2.2", Path("/k"))
    assert f".:{servicenet.DNS_PORT} {{" in corefile and "bind 192.0.2.2" in corefile
    assert f"kubernetes {servicenet.CLUSTER_DOMAIN} " in corefile and "kubeconfig /k" in corefile


def test_kube_proxy_leaves_conntrack_sysctls_alone_and_masquerades_service_traffic() -> None:
    config = servicenet.kube_proxy_config(Path("/k"), realnode.NODE_NAME, "192.0.2.2")
    assert config["mode"] == "iptables" and config["hostnameOverride"] == realnode.NODE_NAME
    assert config["conntrack"]["maxPerCore"] == 0 and config["conntrack"]["min"] == 0
    assert config["iptables"]["masqueradeAll"] is True
    assert ipaddress.IPv4Network(realnode.POD_CIDR).subnet_of(ipaddress.IPv4Network(config["clusterCIDR"]))
    assert all(str(a).startswith("127.0.0.1:") for a in (config["healthzBindAddress"], config["metricsBindAddress"]))


def test_a_template_made_for_the_real_node_keeps_its_own_settings_and_passes_restricted() -> None:
    template = {
        "spec": {
            "nodeSelector": {"zone": "a"},
            "securityContext": {"runAsUser": 1000},
            "containers": [{"name": "c", "image": "x", "securityContext": {"readOnlyRootFilesystem": False}}],
        }
    }
    out = realpods.on_real_node(template, "localhost/ringleader/trainer:dev")["spec"]
    assert template["spec"]["nodeSelector"] == {"zone": "a"}  # the input is left alone
    assert out["nodeSelector"] == {"zone": "a", realnode.LABEL: "true"} and realpods.TOLERATION in out["tolerations"]
    assert out["securityContext"] == {**realpods.RESTRICTED_POD, "runAsUser": 1000}
    [c] = out["containers"]
    assert (c["image"], c["imagePullPolicy"]) == ("localhost/ringleader/trainer:dev", "Always")
    assert c["securityContext"]["readOnlyRootFilesystem"] is False  # the template's choice wins
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": realpods.TMP, "mountPath": "/tmp"} in c["volumeMounts"]
    assert (
        realpods.on_real_node({"spec": {"containers": [{"name": "c", "image": "y"}]}})["spec"]["containers"][0]["image"]
        == "y"
    )


def test_the_demo_puts_every_role_on_the_real_node_and_unclaimed_checkpoints_in_an_empty_dir() -> None:
    template = {"spec": {"containers": [{"name": "trainer", "image": "ringleader/trainer:0.1.0"}]}}
    job = {"spec": {"workers": {"template": template}, "parameterServers": {"template": template},
                    "checkpoint": {"intervalSteps": 100}}}  # fmt: skip
    out = demo.for_real_node(job)
    for role in ("workers", "parameterServers"):
        spec = out["spec"][role]["template"]["spec"]
        assert spec["nodeSelector"][realnode.LABEL] == "true"
        assert spec["containers"][0]["image"] == images.TRAINER.name
        assert {"name": "checkpoints", "emptyDir": {}} in spec["volumes"]
        assert {"name": "checkpoints", "mountPath": "/checkpoints"} in spec["containers"][0]["volumeMounts"]
    claimed = demo.for_real_node({**job, "spec": {**job["spec"], "checkpoint": {"claimName": "ckpt"}}})
    assert all(v["name"] != "checkpoints" for v in claimed["spec"]["workers"]["template"]["spec"]["volumes"])
