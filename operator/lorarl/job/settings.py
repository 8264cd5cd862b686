"""Operator-level settings of the pure render (stdlib only: `lorarl run` parses them into
``control.options.Options`` and the reconciler hands them to ``render.children``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__

# The tools image: the operator's own image, which holds the reporter zipapp and runs the
# reporter sidecar (render.reporter_install_container, render.reporter_sidecar). The chart and
# the install bundle pass the operator's image reference (`lorarl run --tools-image`); without
# it, the chart's default image of this version.
DEFAULT_TOOLS_IMAGE = f"ghcr.io/lorarl/lorarl-operator:{__version__}"

# KubeRay's own helm chart labels its operator's pods app.kubernetes.io/name: kuberay-operator
# (helm-chart/kuberay-operator/templates/_helpers.tpl, the "kuberay-operator.name" helper).
DEFAULT_KUBERAY_POD_LABELS: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "kuberay-operator"),)


def parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` (kubectl's -l equality form) as sorted pairs; '' is no label at all."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{part!r}: expected key=value")
        pairs[key.strip()] = value.strip()
    return tuple(sorted(pairs.items()))


# The label the API server sets on every namespace, its name (immutable, since Kubernetes 1.22):
# what a NetworkPolicy's namespaceSelector matches one namespace by.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def format_labels(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels)


@dataclass(frozen=True)
class NetworkPolicySettings:
    """The per-job NetworkPolicy (render.network_policy): rendered or not, and the peer that is
    KubeRay's operator (admitted on the dashboard port only): its namespace by name ('' = not by
    name) and by labels (() = any namespace, when no name is set either), and its pods' labels
    (() = every pod of those namespaces). The chart names the namespace (its value
    networkPolicy.kuberayOperator.namespace, default kuberay-system)."""

    enabled: bool = True
    egress: bool = True  # also the export and load Jobs' egress policies (render.egress_policy)
    kuberay_namespace_labels: tuple[tuple[str, str], ...] = ()
    kuberay_pod_labels: tuple[tuple[str, str], ...] = DEFAULT_KUBERAY_POD_LABELS
    kuberay_namespace: str = ""


@dataclass(frozen=True)
class EgressSettings:
    """The cluster's own address ranges (its Service and pod CIDRs, which no pod can find out:
    the chart's security.clusterCIDRs), refused by the export and load pods and excepted from
    their egress policies, less the allowed ones (security.allowedInternalCIDRs); both as CIDR
    strings, checked where the operator starts (lorarl.adapter.egress.parse_cidrs)."""

    refused_cidrs: tuple[str, ...] = ()
    allowed_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderSettings:
    network_policy: NetworkPolicySettings = field(default_factory=NetworkPolicySettings)
    tools_image: str = DEFAULT_TOOLS_IMAGE
    egress: EgressSettings = field(default_factory=EgressSettings)


DEFAULT = RenderSettings()
