"""The reporter's OOM check reads the container's memory cgroup as the kernel writes it."""

from __future__ import annotations

import pathlib

from lorarl.reporter import oom

# Documentation/admin-guide/cgroup-v1/memory.rst (memory.oom_control) and cgroup-v2.rst
# (memory.events): the formats the kernel writes
V1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
V2 = "low 0\nhigh 0\nmax 14\noom 3\noom_kill 3\noom_group_kill 0\n"


def test_the_kill_count_is_read_from_either_cgroup_version(tmp_path: pathlib.Path):
    (tmp_path / "v1").write_text(V1)
    (tmp_path / "v2").write_text(V2)
    assert oom.kills((str(tmp_path / "v2"),)) == 3
    assert oom.kills((str(tmp_path / "missing"), str(tmp_path / "v1"))) == 2
    assert oom.kills((str(tmp_path / "missing"),)) is None


def test_only_a_sigkilled_trainer_while_the_count_rose_is_an_oom_kill():
    assert oom.killed(137, 0, 1)
    assert not oom.killed(137, 1, 1)  # SIGKILLed by someone else
    assert not oom.killed(1, 0, 1)  # another process of the container was killed; the trainer failed on its own
    assert not oom.killed(137, None, None)  # no cgroup file: never guessed
