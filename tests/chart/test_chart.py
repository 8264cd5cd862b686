"""The chart, offline: one CRD source, lint, what it renders for default and non-default values,
and what its values.schema.json refuses (helm's own error output is the oracle)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.chart.helm import CHART, NAMESPACED_HA, cluster_role, kinds, pick
from tests.helpers import REPO, seed_doc

FULLNAME = "lorarl-lorarl-operator"
needs_helm = pytest.mark.controlplane  # the helm binary comes from hack/controlplane/build.sh


def rules_of(role: dict) -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples of a Role/ClusterRole."""
    return sorted((g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"])


# -- one source -------------------------------------------------------------------------------


def test_chart_crd_is_the_generated_crd():
    """helm installs crds/ verbatim: it must be the CRD generated from api.py (`make generate`)."""
    assert (CHART / "crds" / "lorarl.dev_lorarljobs.yaml").read_bytes() == (REPO / "crds" / "lorarl.dev_lorarljobs.yaml").read_bytes()


def test_artifacthub_annotations_match_the_crd_and_the_seed_example():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    notes = chart["annotations"]
    crd = yaml.safe_load((REPO / "crds" / "lorarl.dev_lorarljobs.yaml").read_text())
    [card] = yaml.safe_load(notes["artifacthub.io/crds"])
    assert (card["kind"], card["name"]) == (crd["spec"]["names"]["kind"], crd["metadata"]["name"])
    assert card["version"] in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    assert yaml.safe_load(notes["artifacthub.io/crdsExamples"]) == [seed_doc()]
    assert notes["artifacthub.io/operator"] == "true"
    assert notes["artifacthub.io/operatorCapabilities"] in {"Basic Install", "Seamless Upgrades", "Full Lifecycle", "Deep Insights", "Auto Pilot"}
    assert chart["appVersion"] == chart["version"] == "0.1.0"


def test_every_value_is_documented():
    """Each key the chart owns (schema objects with additionalProperties: false) has a comment
    right above it in values.yaml, and every key of values.yaml is in the schema."""
    import json
    import re

    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing keys
    undocumented, unknown = [], []
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        node = schema
        for _, parent in stack:
            node = (node.get("properties") or {}).get(parent, {})
        stack.append((indent, key))
        if node.get("additionalProperties") is not False:
            continue  # inside a Kubernetes type (resources, securityContext, ...): the value itself
        if key not in node["properties"]:
            unknown.append(".".join(k for _, k in stack))
        if not lines[i - 1].lstrip().startswith("#"):
            undocumented.append(".".join(k for _, k in stack))
    assert (undocumented, unknown) == ([], [])


# -- helm lint and the default render ------------------------------------------------------------


@needs_helm
def test_lint_strict(helm):
    out = helm("lint", "--strict", CHART)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout
    # and with the non-default values of the other tests
    helm(
        "lint",
        "--strict",
        CHART,
        "--set",
        "watch.allNamespaces=false,watch.namespaces={a,b},replicaCount=2,podDisruptionBudget.enabled=true,metrics.serviceMonitor.enabled=true",
    )


@needs_helm
def test_default_render(helm):
    docs = helm.render()
    assert kinds(docs) == [
        *["ClusterRole"] * 4,  # the operator's, its -metrics-reader, -view and -edit
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",  # the metrics port: Prometheus only
        "Pod",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        *["ValidatingAdmissionPolicy"] * 4,
        *["ValidatingAdmissionPolicyBinding"] * 4,
    ]
    for d in docs:
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "lorarl-operator"
        assert labels["app.kubernetes.io/instance"] == "lorarl"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "lorarl-operator-0.1.0"
        assert labels["app.kubernetes.io/component"] in ("operator", "test", "tenant-roles", "metrics-reader")
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert d["metadata"]["namespace"] == "lorarl-system"

    deploy = pick(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "ghcr.io/lorarl/lorarl-operator:0.1.0"
    assert "command" not in container  # the image's entrypoint is `lorarl`
    assert container["args"] == [
        "run",
        "--all-namespaces",
        "--liveness",
        "http://0.0.0.0:8080/healthz",
        "--metrics-port",
        "9090",
        "--metrics-auth",
        "kubernetes",  # authenticated metrics by default (issue 35, point 6)
        "--log-format",
        "json",
        "--tools-image",
        "ghcr.io/lorarl/lorarl-operator:0.1.0",  # the operator's own image: the jobs' tools image
        "--kuberay-operator-namespace-labels",
        "",
        "--kuberay-operator-namespace",
        "kuberay-system",  # KubeRay's namespace only (docs/gitops.md installs it there), not any
        "--kuberay-operator-pod-labels",
        "app.kubernetes.io/name=kuberay-operator",
        "--leader-elect",
        "--leader-election-namespace",
        "$(POD_NAMESPACE)",
        "--leader-election-id",
        FULLNAME,
    ]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8080, "metrics": 9090}
    assert deploy["spec"]["replicas"] == 1
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == FULLNAME
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}

    assert pick(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    service = pick(docs, "Service")
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]

    cluster_rules = rules_of(pick(docs, "ClusterRole", FULLNAME))
    assert ("lorarl.dev", "lorarljobs/finalizers", "update") in cluster_rules
    assert [r for r in cluster_rules if r[1] == "networkpolicies"] == [("networking.k8s.io", "networkpolicies", v) for v in ("create", "patch")]
    assert ("apiextensions.k8s.io", "customresourcedefinitions", "watch") in cluster_rules
    assert not any(r == "namespaces" for _, r, _ in cluster_rules)  # kopf lists namespaces only when namespaced
    lease_role = pick(docs, "Role", f"{FULLNAME}-leader-election")
    assert rules_of(lease_role) == [("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")]
    assert pick(docs, "ClusterRoleBinding")["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": "lorarl-system"}]


@needs_helm
@pytest.mark.parametrize("values", [{}, {"watch": {"allNamespaces": False, "namespaces": ["a", "b"]}}], ids=["cluster", "namespaced"])
def test_no_rule_reaches_secrets_or_wildcards(helm, values):
    for d in helm.render(values=values):
        for rule in d.get("rules", []):
            if "nonResourceURLs" in rule:  # the metrics reader: get /metrics, nothing else
                assert rule == {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}, rule
                continue
            assert "secrets" not in rule["resources"] and "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"], rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


@needs_helm
def test_a_namespaced_and_a_cluster_wide_install_differ_only_in_where_the_policies_bind(helm):
    """So tests/security/test_tenants.py, which runs the reference checks against a namespaced
    install, proves them for a cluster-wide one too."""
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    cluster = [d for d in helm.render() if d["kind"] in kinds]
    namespaced = [d for d in helm.render(values={"watch": {"allNamespaces": False, "namespaces": ["a", "b"]}}) if d["kind"] in kinds]
    selector = {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}}
    for doc in cluster:
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            assert "matchResources" not in doc["spec"]  # everywhere
            doc["spec"]["matchResources"] = selector
    assert namespaced == cluster
    authority = pick(cluster, "ValidatingAdmissionPolicy", f"{FULLNAME}-job-authority")
    assert authority["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]


@needs_helm
def test_helm_test_pod_is_restricted_and_validates_the_seed(helm, tmp_path):
    docs = helm.render()
    pod = pick(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["args"] == ["validate", "-f", "/examples/example.yaml"]
    example = pick(docs, "ConfigMap")
    assert yaml.safe_load(example["data"]["example.yaml"]) == seed_doc()
    # the Pod's command, run here on the mounted file's content, passes
    (tmp_path / "example.yaml").write_text(example["data"]["example.yaml"])
    out = subprocess.run(
        [sys.executable, "-m", "lorarl.cli", *pod["spec"]["containers"][0]["args"][:-1], tmp_path / "example.yaml"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "valid" in out.stdout, out.stderr
    assert "Pod" not in kinds(helm.render("--set", "tests.enabled=false"))


# -- non-default values ---------------------------------------------------------------------------


@needs_helm
def test_network_policy_value(helm):
    """networkPolicy.enabled=false: `lorarl run --no-network-policy` and no rule on NetworkPolicies
    (the operator would not use it); KubeRay's operator's labels reach the flags as K=V,..."""

    def args_and_rules(*values):
        docs = helm.render(*values)
        [container] = pick(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
        return container["args"], [r for r in rules_of(pick(docs, "ClusterRole", FULLNAME)) if r[1] == "networkpolicies"]

    args, rules = args_and_rules("--set", "networkPolicy.enabled=false")
    assert "--no-network-policy" in args and not [a for a in args if a.startswith("--kuberay-operator")]
    assert rules == []
    args, rules = args_and_rules(
        "--set-json",
        'networkPolicy.kuberayOperator={"namespaceLabels": {"kubernetes.io/metadata.name": "ray-system", "team": "ml"}, "podLabels": {"app.kubernetes.io/name": null}}',
    )
    assert "--no-network-policy" not in args
    assert args[args.index("--kuberay-operator-namespace-labels") + 1] == "kubernetes.io/metadata.name=ray-system,team=ml"
    assert args[args.index("--kuberay-operator-pod-labels") + 1] == ""
    assert args[args.index("--kuberay-operator-namespace") + 1] == "kuberay-system"  # the default stays
    args, _ = args_and_rules("--set", "networkPolicy.kuberayOperator.namespace=ray-system")
    assert args[args.index("--kuberay-operator-namespace") + 1] == "ray-system"
    args, _ = args_and_rules("--set", "networkPolicy.kuberayOperator.namespace=")
    assert args[args.index("--kuberay-operator-namespace") + 1] == ""  # any namespace the labels match
    with pytest.raises(Exception, match="namespace"):
        helm.render("--set", "networkPolicy.kuberayOperator.namespace=Not_A_Name")
    assert rules == [("networking.k8s.io", "networkpolicies", v) for v in ("create", "patch")]


@needs_helm
def test_namespaced_ha_render(helm):
    docs = helm.render(values=NAMESPACED_HA)
    assert "ServiceMonitor" not in kinds(docs)
    [container] = pick(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:5] == ["run", "--namespace", "team-a", "--namespace", "team-b"]
    assert "--all-namespaces" not in args and args[-2:] == ["--resync-seconds", "60"]
    assert container["image"] == "registry.example/lorarl@sha256:" + "a" * 64
    assert args[args.index("--tools-image") + 1] == container["image"]  # the jobs' tools image: the same, pinned
    assert pick(docs, "Deployment")["spec"]["replicas"] == 2
    assert pick(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1

    # namespaced rules in a Role per watched namespace, only kopf's cluster reads in the ClusterRole
    for ns in ("team-a", "team-b"):
        role = pick(docs, "Role", FULLNAME, ns)
        assert ("ray.io", "rayjobs", "create") in rules_of(role)
        binding = pick(docs, "RoleBinding", FULLNAME, ns)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": "lorarl-system"}]
    assert rules_of(pick(docs, "ClusterRole", FULLNAME)) == [
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("authentication.k8s.io", "tokenreviews", "create"),  # authenticated /metrics
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ]


@needs_helm
def test_metrics_are_for_prometheus_only(helm):
    """Issue 35, point 6: the metrics name every tenant's jobs. By default a NetworkPolicy admits
    only the monitoring namespace's Prometheus to the metrics port, the operator checks each
    scrape's token (--metrics-auth kubernetes, with the review rules), and the ClusterRole
    <release>-lorarl-operator-metrics-reader is what Prometheus is bound to. metrics.authentication=false is the
    documented opt-out: plain metrics, no review rules, no reader role."""
    docs = helm.render()
    policy = pick(docs, "NetworkPolicy")
    deploy = pick(docs, "Deployment")
    assert policy["spec"]["podSelector"] == deploy["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                }
            ],
            "ports": [{"protocol": "TCP", "port": 9090}],
        }
    ]
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--metrics-auth") + 1] == "kubernetes"
    reader = cluster_role(docs, "metrics-reader")
    assert reader["metadata"]["name"] == f"{FULLNAME}-metrics-reader"
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    rules = rules_of(pick(docs, "ClusterRole", FULLNAME))
    assert ("authentication.k8s.io", "tokenreviews", "create") in rules and ("authorization.k8s.io", "subjectaccessreviews", "create") in rules

    docs = helm.render(
        "--set",
        "metrics.networkPolicy.namespaceSelector.matchLabels.team=obs",
        "--set-json",
        'metrics.networkPolicy.podSelector={"matchLabels": {"app": "prom"}}',
    )
    peer = pick(docs, "NetworkPolicy")["spec"]["ingress"][0]["from"][0]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring", "team": "obs"}},
        "podSelector": {"matchLabels": {"app": "prom", "app.kubernetes.io/name": "prometheus"}},
    }

    plain = helm.render("--set", "metrics.authentication=false,metrics.networkPolicy.enabled=false,metrics.serviceMonitor.enabled=true")
    [container] = pick(plain, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--metrics-auth") + 1] == "none"
    assert "NetworkPolicy" not in kinds(plain)
    assert f"{FULLNAME}-metrics-reader" not in [d["metadata"]["name"] for d in plain if d["kind"] == "ClusterRole"]
    assert not [r for r in rules_of(pick(plain, "ClusterRole", FULLNAME)) if r[1] in ("tokenreviews", "subjectaccessreviews")]
    assert "bearerTokenFile" not in pick(plain, "ServiceMonitor")["spec"]["endpoints"][0]


@needs_helm
def test_tenant_roles_aggregate_into_view_edit_and_admin(helm):
    """Issue 35, point 6 (the real API server's aggregation: tests/security/test_tenants.py)."""
    docs = helm.render()
    view, edit = cluster_role(docs, "view"), cluster_role(docs, "edit")
    assert (view["metadata"]["name"], edit["metadata"]["name"]) == (f"{FULLNAME}-view", f"{FULLNAME}-edit")  # releases side by side
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k: v for k, v in view["metadata"]["labels"].items() if k.startswith(aggregate)} == {aggregate + r: "true" for r in ("view", "edit", "admin")}
    assert {k: v for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate)} == {aggregate + r: "true" for r in ("edit", "admin")}
    assert rules_of(view) == sorted(("lorarl.dev", r, v) for r in ("lorarljobs", "lorarljobs/status") for v in ("get", "list", "watch"))
    assert rules_of(edit) == sorted(
        ("lorarl.dev", "lorarljobs", v) for v in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    )
    off = helm.render("--set", "tenantRoles.create=false")
    assert not {f"{FULLNAME}-view", f"{FULLNAME}-edit"} & {d["metadata"]["name"] for d in off if d["kind"] == "ClusterRole"}


@needs_helm
def test_servicemonitor_render(helm):
    assert "ServiceMonitor" not in kinds(helm.render())
    docs = helm.render(values={"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}, "interval": "15s"}}})
    monitor, service = pick(docs, "ServiceMonitor"), pick(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    # it selects the metrics Service by its labels and port name
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["lorarl-system"]}
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "scheme": "http",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",  # Prometheus' own token
            "honorLabels": True,
            "interval": "15s",
        }
    ]
    assert service["spec"]["ports"][0]["name"] == "metrics"
    out = helm("template", "x", CHART, "--set", "metrics.serviceMonitor.enabled=true,metrics.service.enabled=false", check=False)
    assert out.returncode != 0 and "metrics.serviceMonitor.enabled needs metrics.service.enabled" in out.stderr


# -- values.schema.json -------------------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize(
    "values, expected",
    [
        ({"replicaCount": "2"}, "at '/replicaCount': got string, want integer"),
        ({"watch": {"allNamespaces": False, "namespaces": ["Team_A"]}}, "at '/watch/namespaces/0': 'Team_A' does not match pattern"),
        ({"watch": {"allNamespaces": False, "namespaces": []}}, "at '/watch/namespaces': minItems: got 0, want 1"),
        ({"watch": {"allNamespaces": True, "namespaces": ["a"]}}, "at '/watch/namespaces': maxItems: got 1, want 0"),
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "at '/leaderElection/enabled': value must be true"),
        ({"replicas": 2}, "additional properties 'replicas' not allowed"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"),
        ({"logFormat": "xml"}, "at '/logFormat': value must be one of 'json', 'plain', 'full'"),
    ],
    ids=[
        "replicas-string",
        "namespace-not-dns-label",
        "namespaced-without-namespaces",
        "both-scopes",
        "ha-without-leader-election",
        "unknown-key",
        "pull-policy",
        "log-format",
    ],
)
def test_schema_rejects_bad_values(helm, values, expected):
    out = helm("template", "x", CHART, "--values", "-", input=yaml.safe_dump(values), check=False)
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr
    assert expected in out.stderr, out.stderr


def owned_leaves(values: dict, schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the values the chart owns, down to Kubernetes-typed or scalar values."""
    out = []
    for key, value in values.items():
        node = schema["properties"][key]
        path = f"{prefix}{key}"
        if isinstance(value, dict) and node.get("additionalProperties") is False:
            out += owned_leaves(value, node, path + ".")
        else:
            out.append(path)
    return out


def test_readme_documents_every_value():
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [p for p in owned_leaves(values, schema) if f"| `{p}` |" not in readme]
    assert missing == []


@needs_helm
def test_long_release_names_keep_dns_label_names(helm):
    release = "a-release-name-of-the-maximum-length-helm-allows-53c"  # 52 characters
    docs = helm.render(release=release)
    for d in docs:
        if d["kind"] in ("Service", "Pod", "Deployment", "ServiceAccount", "ConfigMap"):
            assert len(d["metadata"]["name"]) <= 63, d["metadata"]["name"]
    assert pick(docs, "Service")["metadata"]["name"].endswith("-metrics")
    assert pick(docs, "Pod")["metadata"]["name"].endswith("-test")


@needs_helm
def test_kubernetes_older_than_1_30_is_refused(helm):
    out = helm("template", "x", CHART, "--kube-version", "1.29.9", check=False)
    assert out.returncode != 0 and "kubeVersion: >=1.30.0-0" in out.stderr, out.stderr
    helm("template", "x", CHART, "--kube-version", "1.30.0")


@needs_helm
def test_notes_say_how_to_get_an_image_and_name_no_url_that_may_not_exist(helm):
    """helm's own rendering of NOTES.txt (install --dry-run=client): with the placeholder image it
    says that none is published and how to build one; it points at no remote file."""
    notes = helm("install", "x", CHART, "--dry-run=client", "-n", "lorarl-system").stdout.split("NOTES:", 1)[1]
    assert "No operator image is published" in notes and "Dockerfile" in notes and "image.repository=" in notes
    assert "https://" not in notes and "manifests/qwen3-4b-lora-amd.yaml" in notes
    mine = helm("install", "x", CHART, "--dry-run=client", "-n", "lorarl-system", "--set", "image.repository=registry.example/lorarl-operator").stdout
    assert "No operator image is published" not in mine
    readme = (CHART / "README.md").read_text()
    assert "No operator image is published" in readme and "--set image.repository=REGISTRY/lorarl-operator" in readme


@needs_helm
def test_security_values_reach_the_operators_flags(helm):
    """security.clusterCIDRs / allowedInternalCIDRs become --cluster-cidrs / --allowed-internal-cidrs
    (none by default: no range is knowable offline); networkPolicy.egress=false, --no-egress-network-policy."""

    def args(*values):
        [container] = pick(helm.render(*values), "Deployment")["spec"]["template"]["spec"]["containers"]
        return container["args"]

    default = args()
    assert not [a for a in default if a in ("--cluster-cidrs", "--allowed-internal-cidrs", "--no-egress-network-policy")]
    given = args(
        "--set-json",
        'security={"clusterCIDRs": ["10.96.0.0/12", "10.244.0.0/16"], "allowedInternalCIDRs": ["10.96.7.7/32"]}',
        "--set",
        "networkPolicy.egress=false",
    )
    assert given[given.index("--cluster-cidrs") + 1] == "10.96.0.0/12,10.244.0.0/16"
    assert given[given.index("--allowed-internal-cidrs") + 1] == "10.96.7.7/32"
    assert "--no-egress-network-policy" in given
    with pytest.raises(Exception, match="clusterCIDRs"):
        helm.render("--set-json", 'security={"clusterCIDRs": ["kubernetes.default.svc"]}')


def test_the_operator_refuses_a_bad_cidr_flag():
    from tests.helpers import lorarl_cli

    out = lorarl_cli("run", "-A", "--cluster-cidrs", "10.96.0.0/12,nonsense")
    assert out.exit_code == 2 and "'nonsense': not an IPv4 or IPv6 CIDR" in out.stderr, out.stderr
