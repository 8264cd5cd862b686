"""The harness's own network namespaces (lorarl_dev.node.netns.create_owned: Argo CD's application
controller runs in one) beside the real node's tear-down check: one that another live process
owns is not a node's leftover, one whose owner is gone or that is this process's own is, and the
next create_owned sweeps those whose owner is gone. The oracle is `ip netns list` and findmnt,
read by realnode.machine_snapshot."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from lorarl_dev.node import netns, realnode

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and iproute2's ip"),
]


def test_namespaces_of_live_others_are_not_a_nodes_and_dead_owners_are_swept():
    other = subprocess.Popen(["sleep", "600"])
    theirs = f"{netns.OWNED_PREFIX}-{other.pid}-test"
    mine = None
    try:
        netns.create(theirs)
        snapshot = realnode.machine_snapshot()
        assert (netns.NETNS_DIR / theirs).exists()
        assert theirs not in snapshot["netns"] and not any(theirs in m for m in snapshot["mounts"])

        mine = netns.create_owned("test")
        assert mine in realnode.machine_snapshot()["netns"]  # this process's own still counts

        other.kill()
        other.wait()
        assert theirs in realnode.machine_snapshot()["netns"]  # its owner gone: a leftover
        again = netns.create_owned("test")  # sweeps it
        assert again == mine
        assert not (netns.NETNS_DIR / theirs).exists()
    finally:
        other.kill()
        netns.delete(theirs)
        if mine:
            netns.delete(mine)
