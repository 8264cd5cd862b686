"""A real, embedded Kubernetes control plane for tests and the local demo.

etcd + kube-apiserver + kube-controller-manager, built from the Go module
proxy by ``hack/controlplane/build.sh`` into a per-version cache outside the
repository (:mod:`lorarl_dev.binaries`), started as local processes bound to
127.0.0.1 on free ports.

Typical use::

    with ControlPlane() as cp:
        cp.kubectl("get", "ns")

or through the pytest plugin (``lorarl_dev.pytest_plugin``), or detached
for the demo via :func:`up` / :func:`down` / :func:`env`
(``lorarl-dev controlplane up|down|env``).

Children are started in their own sessions (process groups) and killed in
:meth:`ControlPlane.stop`; a non-detached control plane also stops on
interpreter exit (atexit), on SIGTERM/SIGHUP (:mod:`.exit_hooks`), and — through
``PR_SET_PDEATHSIG`` — when its parent process dies outright. Pids are
recorded in ``<workdir>/pids.json`` so that :func:`down` can clean up.

One module per thing it starts: :mod:`.etcd`, :mod:`.apiserver`,
:mod:`.controller_manager` (and the scheduler), :mod:`.nodes` (kwok's or the
real node's namespace; the node itself is :mod:`lorarl_dev.node`), :mod:`.addons`;
:mod:`.cluster` composes them into :class:`ControlPlane`.
"""

from lorarl_dev.controlplane.addons import LORARL_CRD
from lorarl_dev.controlplane.apiserver import ADMISSION_PLUGINS, AUDIT_POLICY
from lorarl_dev.controlplane.cluster import ControlPlane
from lorarl_dev.controlplane.leftovers import sweep_stale_workdirs
from lorarl_dev.controlplane.nodes import KWOK_NODE_ANNOTATION
from lorarl_dev.controlplane.sessions import down, env, up
from lorarl_dev.errors import ControlPlaneError, KubectlError

__all__ = [
    "ADMISSION_PLUGINS",
    "AUDIT_POLICY",
    "KWOK_NODE_ANNOTATION",
    "LORARL_CRD",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "down",
    "env",
    "sweep_stale_workdirs",
    "up",
]
