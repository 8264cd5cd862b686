"""One real Kubernetes node inside the control plane's network namespace.

containerd (Debian's 1.6, a config of our own), kubelet v1.37.2, kube-proxy (iptables mode),
CoreDNS and the fake AMD GPU device plugin, all started with ``nsenter --net`` into the cluster's
namespace by :class:`lorarl_dev.controlplane.ControlPlane` (``node=True``), which owns the
processes (its ``pids.json`` lists them) and calls :meth:`RealNode.start` / :func:`teardown`.

The kubelet and containerd write outside their configured directories (device-plugin sockets,
pod logs, pod network namespaces, ``/kubepods`` cgroups, ``/run/containerd``, ``/var/lib/cni``,
and some global sysctls), so there is one real node per machine at a time: a record in
:data:`RECORD` names it, a second start is refused while its processes live, and a record whose
processes are gone is swept (torn down) at the next start. Tear-down goes by the pids we started,
the processes in our network namespace and in the ``/kubepods`` cgroups, never by process name.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from lorarl_dev.certs import KeyPair, TinyCA
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.node import images, netns
from lorarl_dev.processes import kill_group, pid_alive, pid_is

NODE_NAME = "lorarl-node"
NODE_IP = "10.212.0.2"  # a second address on the namespace's loopback (the kubelet refuses 127/8)
POD_CIDR = "10.213.0.0/24"
BRIDGE = "lorarl0"
APISERVER_PORT = 6443
CLUSTER_DOMAIN = "cluster.local"

#: The one-node-per-machine record (tmpfs: it goes when the mounts it describes go).
RECORD = pathlib.Path("/run/lorarl/realnode.json")
#: The node's state (containerd, kubelet, CNI, configs): a short path, because unix sockets live in
#: it (containerd's, the kubelet's pod-resources and plugin sockets: at most 104-108 bytes), and on
#: disk, because containerd's snapshots (unpacked images) do.
NODE_ROOT = pathlib.Path("/var/lib/lorarl")


def node_dir(netns_name: str) -> pathlib.Path:
    return NODE_ROOT / netns_name


#: The node's processes in the order they are stopped.
STOP_ORDER = ("fakegpu", "coredns", "kube-proxy", "kubelet", "containerd")

#: Where the kubelet and containerd write regardless of their configuration (removed at tear-down).
DEVICE_PLUGIN_DIR = pathlib.Path("/var/lib/kubelet/device-plugins")
FIXED_DIRS = (pathlib.Path("/var/log/pods"), pathlib.Path("/var/log/containers"), pathlib.Path("/var/lib/cni"))
CONTAINERD_RUN = pathlib.Path("/run/containerd")
HOSTPATH_PV = pathlib.Path("/tmp/hostpath_pv")  # kube-controller-manager's hostpath provisioner (fixed)

#: Global sysctls the kubelet sets (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables,
#: v1.37.2: it modifies them unless protectKernelDefaults, which makes it refuse to start instead);
#: recorded before and restored at tear-down.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")

#: Debian packages the node needs (hack/node/packages.sh installs them), with a file each provides.
PACKAGES = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "umoci": "/usr/bin/umoci",
    "busybox-static": "/bin/busybox",
    "openssl": "/usr/bin/openssl",
    "iptables": "/usr/sbin/iptables",
    "conntrack": "/usr/sbin/conntrack",
    "iproute2": "/usr/bin/ip",
    "util-linux": "/usr/bin/nsenter",
    "gcc": "/usr/bin/gcc",
    "libc6-dev": "/usr/lib/x86_64-linux-gnu/libc.a",
}

#: What the AMD GPU node labeller publishes per profile (amd.com/gpu.device-id is what lorarl's
#: profiles select on; see lorarl.job.profiles and /work/shared/reference/kuberay-and-amd-on-kubernetes.md).
_PRODUCT_NAMES = {
    "MI300X": "AMD_Instinct_MI300X_OAM",
    "MI325X": "AMD_Instinct_MI325X_OAM",
    "MI350X": "AMD_Instinct_MI350X_OAM",
    "MI355X": "AMD_Instinct_MI355X_OAM",
}


def node_labels(profile: str) -> dict[str, str]:
    from lorarl.job.profiles import PROFILES

    labels = dict(PROFILES[profile].node_selector)
    if profile in _PRODUCT_NAMES:
        labels.update({"amd.com/gpu.product-name": _PRODUCT_NAMES[profile], "amd.com/gpu.family": "AI"})
    return labels


def missing_requirements() -> list[str]:
    """Why a real node cannot start here (empty when it can): not root, or Debian packages missing."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root (a real node needs root: namespaces, mounts, cgroups)")
    missing = [pkg for pkg, path in PACKAGES.items() if not os.path.exists(path)]
    if missing:
        reasons.append("Debian packages missing: " + " ".join(missing) + " (run hack/node/packages.sh)")
    return reasons


# --------------------------------------------------------------------------------------------
# configuration files


def containerd_config(d: pathlib.Path) -> str:
    """containerd 1.6 (config version 2), everything under ``d`` where it can be configured."""
    return f"""version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  # no CAP_SYS_RESOURCE here: runc cannot set oom_score_adj below the parent's
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d.parent}/cni/net.d"
"""


def cni_config(ipam_dir: pathlib.Path) -> dict[str, Any]:
    """The pods' network: a bridge inside the namespace, its gateway the only route."""
    return {
        "cniVersion": "1.0.0",
        "name": "lorarl",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,  # pods reach the node IP and ClusterIPs through the bridge
                "ipMasq": False,  # nothing leaves the namespace
                "hairpinMode": True,  # a pod reaching itself through a Service
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def kubelet_config(d: pathlib.Path, pki: pathlib.Path, resolv: pathlib.Path, runtime_sock: pathlib.Path) -> dict[str, Any]:
    """KubeletConfiguration: every setting this machine needs (hack/controlplane/README.md#node)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,  # the API server dials it for logs/exec; nothing outside the namespace
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}, "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "failCgroupV1": False,  # this machine is cgroup v1 (hybrid); v2 cannot be had here
        "cgroupDriver": "cgroupfs",
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE: the default -999 fails
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,  # imported images can never be pulled again
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
        "maxPods": 40,
        "podCIDR": POD_CIDR,
        "clusterDNS": [NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv),  # empty: pods search cluster names only
        "containerRuntimeEndpoint": f"unix://{runtime_sock}",
        "serializeImagePulls": False,
        "registerNode": True,
        "nodeStatusReportFrequency": "10s",
        "volumeStatsAggPeriod": "0s",  # no du over volumes on 2 cores
        "localStorageCapacityIsolation": True,
    }


def kube_proxy_config(kubeconfig: pathlib.Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": POD_CIDR,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        # SNAT every Service connection to the bridge gateway, so replies from a pod on the same
        # bridge come back through the namespace's conntrack whatever br_netfilter does
        "iptables": {"masqueradeAll": True, "syncPeriod": "30s", "minSyncPeriod": "1s"},
        # 0 = leave the kernel's conntrack settings alone (they are not per-namespace)
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s", "udpTimeout": "0s", "udpStreamTimeout": "0s"},
    }


def corefile(kubeconfig: pathlib.Path) -> str:
    return f""".:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} lorarl
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""


#: RBAC for CoreDNS's kubernetes plugin (the rules of CoreDNS's own deployment manifest:
#: coredns/deployment kubernetes/coredns.yaml.sed, ClusterRole system:coredns).
COREDNS_RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:coredns"},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:coredns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}],
    },
]

#: The default StorageClass, provisioned by kube-controller-manager's own hostpath provisioner
#: (--enable-hostpath-provisioner; pkg/volume/hostpath/host_path.go: /tmp/hostpath_pv/<uuid>, the
#: claim's access modes copied to the volume, so RWO and RWX both bind on one node).
STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "hostpath", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": "kubernetes.io/host-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "Immediate",
}


def _write(path: pathlib.Path, text: str, mode: int = 0o644) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# --------------------------------------------------------------------------------------------
# the node


class NodeHost(Protocol):
    """What the node needs of the control plane that runs it
    (:class:`lorarl_dev.controlplane.ControlPlane`, which imports this module, not the reverse)."""

    netns: str | None
    pids: dict[str, int]
    ca: TinyCA | None

    def spawn(self, name: str, args: list[str], *, exe: str | None = None) -> None: ...
    def check_alive(self, name: str) -> None: ...
    def log_tail(self, name: str, lines: int = 30) -> str: ...
    def wait_http(self, name: str, url: str, timeout: float) -> None: ...
    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]: ...
    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]: ...
    def component_kubeconfig(self, name: str, pair: KeyPair, *, inner: bool = True, context: str | None = None) -> pathlib.Path: ...
    def stop_child(self, name: str) -> None: ...
    def start_child(self, name: str) -> None: ...


class RealNode:
    """The node's processes, started by (and recorded in) the control plane ``cp``."""

    def __init__(self, cp: NodeHost, *, gpus: int = 8, profile: str = "MI355X") -> None:
        if gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {gpus}")
        self.cp = cp
        self.gpus = gpus
        self.profile = profile
        self.dir = node_dir(cp.netns)
        self.containerd_dir = self.dir / "containerd"
        self.runtime_sock = self.containerd_dir / "containerd.sock"
        self.kubelet_dir = self.dir / "kubelet"
        self.timings: dict[str, float] = {}

    # -- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        t0 = time.monotonic()
        self._write_certs()
        self._start_containerd()
        for archive in (images.pause_archive(), images.busybox_archive()):
            self.import_image(archive)
        self.timings["containerd"] = time.monotonic() - t0
        self._start_kubelet()
        self.timings["kubelet_registered"] = time.monotonic() - t0
        self._start_fakegpu()
        self.cp.kubectl(
            "apply", "--server-side", "--field-manager=lorarl-testing", "-f", "-", input="\n".join(json.dumps(o) for o in [*COREDNS_RBAC, STORAGE_CLASS])
        )
        self._start_kube_proxy()
        self._start_coredns()
        self.cp.kubectl("label", "node", NODE_NAME, "--overwrite", *(f"{k}={v}" for k, v in node_labels(self.profile).items()))
        self._wait_node_ready()
        self.timings["ready"] = time.monotonic() - t0

    def _write_certs(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = self.cp.ca
        (pki / "ca.crt").write_bytes(ca.cert_pem)
        ca.serving_cert(NODE_NAME, [NODE_IP, NODE_NAME]).write(pki, "kubelet-serving")
        self._kubelet_kubeconfig = self.cp.component_kubeconfig("kubelet", ca.client_cert(f"system:node:{NODE_NAME}", ("system:nodes",)), inner=True)
        self._proxy_kubeconfig = self.cp.component_kubeconfig("kube-proxy", ca.client_cert("system:kube-proxy"), inner=True)
        self._coredns_kubeconfig = self.cp.component_kubeconfig("coredns", ca.client_cert("system:coredns"), inner=True, context="lorarl")

    def _start_containerd(self) -> None:
        cfg = _write(self.containerd_dir / "config.toml", containerd_config(self.containerd_dir))
        _write(self.dir / "cni" / "net.d" / "10-lorarl.conflist", json.dumps(cni_config(self.dir / "cni" / "ipam"), indent=2))
        self.cp.spawn("containerd", ["--config", str(cfg), "--log-level", "warn"], exe="/usr/bin/containerd")
        self._wait(lambda: self._ctr("version", check=False).returncode == 0, "containerd", 30)

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["ctr", "--address", str(self.runtime_sock), "--namespace", "k8s.io", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
        return proc

    def import_image(self, archive: str | os.PathLike[str]) -> list[str]:
        """Import an OCI (or docker) archive into the node's containerd; returns the image names.

        Pods use them with ``imagePullPolicy: Never`` or ``IfNotPresent``; the kubelet never
        garbage-collects them (imageGCHighThresholdPercent 100).
        """
        archive = pathlib.Path(archive)
        if not archive.is_file():
            raise FileNotFoundError(f"image archive {archive} does not exist")
        before = set(self.images())
        # --all-platforms: an archive of one platform need not match ctr's idea of the host's
        self._ctr("images", "import", "--all-platforms", "--no-unpack", str(archive))
        names = sorted(set(self.images()) - before) or self._names_in(archive)
        for name in names:  # unpack for the CRI snapshotter, so the first pod need not
            self._ctr("images", "unpack", "--snapshotter", "overlayfs", name, check=False)
        return names

    def images(self) -> list[str]:
        return [line for line in self._ctr("images", "list", "-q").stdout.split() if not line.startswith("sha256:")]

    def tag_image(self, source: str, target: str) -> None:
        """A second name for an imported image (nothing copied: both name the same content)."""
        self._ctr("images", "tag", "--force", source, target)

    def remove_image(self, ref: str) -> None:
        """Remove one name of an image, as the kubelet's image GC or a registry that lost the tag
        would leave a node; the content stays while another name holds it."""
        self._ctr("images", "rm", ref)

    @staticmethod
    def _names_in(archive: pathlib.Path) -> list[str]:
        import tarfile

        with tarfile.open(archive) as tar:
            index = json.load(tar.extractfile("index.json"))
        return [m.get("annotations", {}).get("io.containerd.image.name", "") for m in index.get("manifests", [])]

    def _start_kubelet(self) -> None:
        resolv = _write(self.dir / "resolv.conf", "")
        cfg = _write(self.dir / "kubelet-config.json", json.dumps(kubelet_config(self.dir, self.dir / "pki", resolv, self.runtime_sock), indent=2))
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        self.cp.spawn(
            "kubelet",
            [
                f"--config={cfg}",
                f"--kubeconfig={self._kubelet_kubeconfig}",
                f"--root-dir={self.kubelet_dir}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        self._wait(lambda: self.cp.get(f"/api/v1/nodes/{NODE_NAME}")[0] == 200, "kubelet", 60)

    def stop_kubelet(self) -> None:
        """The kubelet stopped (SIGTERM), its pods' containers left running under containerd: the
        node stops reporting, and the node controller marks it, then its pods, not ready."""
        self.cp.stop_child("kubelet")

    def start_kubelet(self, timeout: float = 120) -> None:
        """The kubelet back (the same flags): it takes over the running containers, the device
        plugin registers again, and the node is Ready with every GPU allocatable."""
        self.cp.start_child("kubelet")
        self._wait_node_ready(timeout)
        self._wait(self._gpus_advertised, "fakegpu", timeout)

    def _start_fakegpu(self) -> None:
        self.cp.spawn("fakegpu", [f"--devices={self.gpus}", f"--plugin-dir={DEVICE_PLUGIN_DIR}/"])
        self._wait(self._gpus_advertised, "fakegpu", 60)

    def _gpus_advertised(self) -> bool:
        """The node's allocatable amd.com/gpu is every fake GPU (the device plugin registered)."""
        code, body = self.cp.get(f"/api/v1/nodes/{NODE_NAME}")
        return code == 200 and json.loads(body)["status"].get("allocatable", {}).get("amd.com/gpu") == str(self.gpus)

    def _start_kube_proxy(self) -> None:
        cfg = _write(self.dir / "kube-proxy.json", json.dumps(kube_proxy_config(self._proxy_kubeconfig), indent=2))
        self.cp.spawn("kube-proxy", [f"--config={cfg}", "--v=0"])
        self.cp.wait_http("kube-proxy", "http://127.0.0.1:10256/healthz", 60)

    def _start_coredns(self) -> None:
        cfg = _write(self.dir / "Corefile", corefile(self._coredns_kubeconfig))
        self.cp.spawn("coredns", [f"-conf={cfg}"])
        self.cp.wait_http("coredns", "http://127.0.0.1:8181/ready", 60)

    def _wait_node_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            code, body = self.cp.get(f"/api/v1/nodes/{NODE_NAME}")
            if code != 200:
                return False
            conds = json.loads(body)["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        self._wait(ready, "kubelet", timeout)

    def _wait(self, ok, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.cp.check_alive(name)
            with contextlib.suppress(OSError, ValueError, KeyError):
                if ok():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name}: not ready after {timeout:.0f}s:\n{self.cp.log_tail(name)}")
            time.sleep(0.2)

    def dns_exec_prefix(self) -> list[str]:
        """A command prefix for a process that must resolve cluster names (the KubeRay operator
        calls ``<head>-svc.<ns>.svc.cluster.local``): ``ip netns exec`` with a resolv.conf naming
        CoreDNS (``/etc/netns/NAME/resolv.conf``, removed at tear-down). Its private mount
        namespace does not matter for such a client (it is not containerd or the kubelet)."""
        _write(netns.ETC_NETNS_DIR / self.cp.netns / "resolv.conf", f"nameserver {NODE_IP}\nsearch svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\noptions ndots:5\n")
        return ["ip", "netns", "exec", self.cp.netns]

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each node process (for the README's numbers)."""
        out = {}
        for name in STOP_ORDER:
            pid = self.cp.pids.get(name)
            with contextlib.suppress(OSError, ValueError, TypeError):
                for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) * 1024
        return out


# --------------------------------------------------------------------------------------------
# the one-node record


def claim(netns_name: str, workdir: pathlib.Path) -> None:
    """Record this node (refusing if another live one holds the machine; sweeping a dead one)."""
    if RECORD.is_file():
        try:
            old = json.loads(RECORD.read_text())
        except (OSError, ValueError):
            old = {}
        if _any_alive(old.get("pids", {})):
            raise ControlPlaneError(
                f"a real node is already running on this machine (netns {old.get('netns')}, workdir "
                f"{old.get('workdir')}); only one can run at a time: stop it first (lorarl-dev controlplane down)"
            )
        sweep()
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "netns": netns_name,
        "workdir": str(workdir),
        "pids": {},
        "sysctls": {k: _read_sysctl(k) for k in KUBELET_SYSCTLS},
        "node_dir": str(node_dir(netns_name)),
        "created": {str(p): not p.exists() for p in (CONTAINERD_RUN, HOSTPATH_PV, *FIXED_DIRS, DEVICE_PLUGIN_DIR, netns.NETNS_DIR, NODE_ROOT)},
        # `ip netns add` makes /run/netns a (shared) mount point the first time: a bind mount of
        # the directory on itself, which os.path.ismount cannot see (same device), mountinfo can
        "netns_dir_was_mount": str(netns.NETNS_DIR) in _mounts_under([str(netns.NETNS_DIR)]),
    }
    _write(RECORD, json.dumps(state, indent=2))


def record_pids(pids: Mapping[str, int]) -> None:
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(RECORD.read_text())
        state["pids"] = dict(pids)
        _write(RECORD, json.dumps(state, indent=2))


def sweep() -> bool:
    """Tear down the node in :data:`RECORD` if its processes are gone (a killed run). True if swept."""
    try:
        state = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return False
    if _any_alive(state.get("pids", {})):
        return False
    teardown(state)
    if state.get("netns"):
        netns.delete(state["netns"])
    release(state)
    return True


def _read_sysctl(key: str) -> str | None:
    try:
        return pathlib.Path("/proc/sys", key).read_text().strip()
    except OSError:
        return None


def _any_alive(pids: Mapping[str, int]) -> bool:
    return any(pid_alive(int(p)) and pid_is(int(p), n) for n, p in pids.items())


# --------------------------------------------------------------------------------------------
# tear-down


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(netns.netns_path(name)).st_ino
    except OSError:
        return None


def _pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is ours (containerd's shims, hostNetwork pods)."""
    found = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if os.stat(d / "ns" / "net").st_ino == inode:
                found.append(int(d.name))
    return found


def _cgroup_mounts() -> list[pathlib.Path]:
    mounts = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):
            mounts.append(pathlib.Path(left.split()[4]))
    return mounts


def _kubepods_cgroups() -> list[pathlib.Path]:
    """``/kubepods`` (and everything below it) in every cgroup hierarchy, deepest first."""
    found = []
    for mount in _cgroup_mounts():
        top = mount / "kubepods"
        if top.is_dir():
            found += [pathlib.Path(p) for p, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _wait_gone(pids: list[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        pids = [p for p in pids if pid_alive(p)]
        time.sleep(0.05)


def _mounts_under(prefixes: Iterable[str]) -> list[str]:
    prefixes = [p.rstrip("/") for p in prefixes]
    found = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if any(target == p or target.startswith(p + "/") for p in prefixes):
            found.append(target)
    return sorted(set(found), key=len, reverse=True)


_MNT_DETACH = 2


def _unmount_all(prefixes: Iterable[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(5):  # a lazy unmount can uncover a mount below it
        targets = _mounts_under(prefixes)
        if not targets:
            return
        for target in targets:
            libc.umount2(target.encode(), _MNT_DETACH)


def teardown(state: Mapping[str, Any]) -> None:
    """Remove everything a node made, by the state :func:`claim` recorded.

    The node's own processes are killed by the caller's pids first (ControlPlane.stop); what is
    left here is whatever they started: pods (in ``/kubepods`` cgroups) and containerd's shims
    (in our network namespace).
    """
    for name in STOP_ORDER:
        pid = state.get("pids", {}).get(name)
        if pid is not None:
            kill_group(int(pid), name)
    # pods and their shims: every process in /kubepods, then whatever else lives in our namespace
    # apart from the control plane (killed by the caller afterwards)
    cp_pids = {int(p) for n, p in state.get("pids", {}).items() if n not in STOP_ORDER}
    for _ in range(3):
        victims = []
        for cg in _kubepods_cgroups():
            with contextlib.suppress(OSError):
                victims += [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        inode = _netns_inode(state.get("netns", ""))
        if inode is not None:
            victims += [p for p in _pids_in_netns(inode) if p not in cp_pids]
        if not victims:
            break
        _kill_pids(victims)
        _wait_gone(victims)
    ndir = state.get("node_dir")
    created = state.get("created", {})
    prefixes = [p for p in (ndir, str(CONTAINERD_RUN), "/var/lib/kubelet") if p]
    _unmount_all(prefixes)
    run_netns = netns.NETNS_DIR
    if run_netns.is_dir():
        for ns in run_netns.glob("cni-*"):  # pod namespaces: containerd 1.6 names them cni-<uuid>
            _unmount_all([str(ns)])
            with contextlib.suppress(OSError):
                ns.unlink()
    for cg in _kubepods_cgroups():
        with contextlib.suppress(OSError):
            cg.rmdir()
    if ndir:
        shutil.rmtree(ndir, ignore_errors=True)
        if created.get(str(NODE_ROOT)):
            with contextlib.suppress(OSError):
                NODE_ROOT.rmdir()
    shutil.rmtree(DEVICE_PLUGIN_DIR, ignore_errors=True)
    with contextlib.suppress(OSError):
        DEVICE_PLUGIN_DIR.parent.rmdir()  # /var/lib/kubelet, if nothing else is in it
    for path in (*FIXED_DIRS, CONTAINERD_RUN, HOSTPATH_PV):
        if created.get(str(path), path in FIXED_DIRS):
            shutil.rmtree(path, ignore_errors=True)
    for key, value in state.get("sysctls", {}).items():
        if value is not None and _read_sysctl(key) != value:
            with contextlib.suppress(OSError):
                pathlib.Path("/proc/sys", key).write_text(value + "\n")


def release(state: Mapping[str, Any]) -> None:
    """After the namespace is deleted: /run/netns as it was, and the machine's node record gone."""
    if state.get("netns"):
        # a per-namespace resolv.conf for `ip netns exec` (cluster DNS for a process that needs it)
        shutil.rmtree(netns.ETC_NETNS_DIR / state["netns"], ignore_errors=True)
    d = netns.NETNS_DIR
    if not state.get("netns_dir_was_mount", True) and d.is_dir() and not any(d.iterdir()):
        _unmount_all([str(d)])
        if state.get("created", {}).get(str(d)):
            with contextlib.suppress(OSError):
                d.rmdir()
    with contextlib.suppress(OSError):
        RECORD.unlink()
    with contextlib.suppress(OSError):
        RECORD.parent.rmdir()


def wait_tcp(thread: netns.NetnsThread, host: str, port: int, timeout: float = 30) -> bool:
    """Whether ``host:port`` (inside the namespace) accepts a connection within ``timeout``."""

    def probe() -> bool:
        with socket.create_connection((host, port), timeout=1):
            return True

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if thread.call(probe):
                return True
        time.sleep(0.1)
    return False


#: Where a node's mounts can be: its state dir, the kubelet's and containerd's fixed paths, the
#: pods' network namespaces, the provisioner's volumes; plus mount types only a runtime makes.
_NODE_MOUNT_PREFIXES = (str(NODE_ROOT), "/var/lib/kubelet", str(CONTAINERD_RUN), str(netns.NETNS_DIR), str(HOSTPATH_PV), "/tmp/lorarl-cp-")
_NODE_MOUNT_TYPES = ("overlay", "nsfs")


def machine_snapshot() -> dict[str, list[str]]:
    """What a node could leave behind on the machine, for before/after comparisons: its mounts,
    network namespaces, the root namespace's iptables rules, the ``kubepods`` cgroups, the fixed
    directories the kubelet and containerd write, and the kubelet's sysctls.

    Mounts, namespaces and cgroups are limited to the places and kinds a node makes (other jobs
    on the machine, such as image builds, mount and unmount chroots of their own meanwhile)."""

    def lines(*cmd: str) -> list[str]:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()

    iptables = [line for line in lines("iptables-save") if line and not line.startswith(("#", ":"))]
    # chain declarations without their packet counters
    iptables += [line.split()[0] for line in lines("iptables-save") if line.startswith(":")]
    cgroups = sorted(f"{m}/{c.name}" for m in _cgroup_mounts() if m.is_dir() for c in m.iterdir() if c.is_dir() and c.name.startswith("kubepods"))
    # a namespace another live process of the harness owns (Argo CD's beside a test stream
    # running in parallel) is that process's, not a node's; this process's own still count
    others = {
        name
        for name in (path.name for path in netns.NETNS_DIR.glob(f"{netns.OWNED_PREFIX}-*"))
        if netns.owner_running(name) and netns.owner_pid(name) != os.getpid()
    }
    mounts = [
        line
        for line in lines("findmnt", "-rn", "-o", "TARGET,FSTYPE")
        if (line.rsplit(" ", 1)[-1] in _NODE_MOUNT_TYPES or any(line.startswith(p) for p in _NODE_MOUNT_PREFIXES))
        and line.split(" ", 1)[0].removeprefix(f"{netns.NETNS_DIR}/") not in others
    ]
    return {
        "mounts": sorted(mounts),
        "netns": sorted(n for n in lines("ip", "netns", "list") if n.startswith(("lorarl-", "cni-")) and n.split()[0] not in others),
        "iptables": sorted(iptables),
        "cgroups": cgroups,
        "paths": sorted(str(p) for p in (*FIXED_DIRS, CONTAINERD_RUN, HOSTPATH_PV, DEVICE_PLUGIN_DIR, RECORD, NODE_ROOT) if p.exists()),
        "sysctls": [f"{k}={_read_sysctl(k)}" for k in KUBELET_SYSCTLS],
    }
