"""The realnode phase's page from the lines a run prints (no node: the run is made up here). The
figure it exists for, apply -> RayJob via lorarl minus the same by hand, paired per round."""

from __future__ import annotations

import json

from bench import realnode


def _run(by_hand, rayjob, *, ok=True, load=5.0):
    return {
        "by_hand": by_hand,
        "watched": {"rayjob": rayjob, "head_pod": rayjob + 0.5, **({"ray_job_succeeded": 100.0} if ok else {})},
        "pod": {"pod_created": 1.0, "pod_scheduled": 1.0, "init_started": 2.0, "init_done": 5.0, "ray_up": 40.0},
        "ray_job_end": 105.0,
        "job_status": "SUCCEEDED" if ok else None,
        "deployment_status": "Complete" if ok else "Failed",
        "reason": None if ok else "SubmissionFailed",
        "phase": None if by_hand else "Succeeded",
        "gpu_hours": None if by_hand else 0.2,
        "timed_out": not ok,
        "load": load,
    }


def test_a_stopped_runs_lines_make_the_page(tmp_path):
    lines = [
        {"node_start_s": 85.0, "images_import_s": 3.0, "helm_install_s": 45.0},
        _run(False, 0.8),
        _run(True, 1.5),
        _run(False, 1.0),
        _run(True, 2.5, ok=False),
    ]
    saved = tmp_path / "stderr.log"
    saved.write_text("Traceback (not JSON)\n" + "\n".join(json.dumps(x) for x in lines) + "\n")
    r = realnode._load(saved)
    assert realnode.added_seconds(r) == [0.8 - 1.5, 1.0 - 2.5]
    page = realnode.markdown(r)
    assert "**What lorarl adds to a run's start: -1.10 s**" in page and "goal < 1 s: met" in page
    assert "| RayJob exists | 0.9 (0.8-1.0) | 2.0 (1.5-2.5) |" in page
    assert "Node start (control plane, node, KubeRay) 85 s" in page
    assert "Failed/SubmissionFailed at 105 s (the wait ran out)" in page

    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\n## Another phase\n\nkept\n")
    realnode.write(r, out)
    realnode.write(r, out)  # a second run replaces its own section and keeps the rest
    text = out.read_text()
    assert text.count(realnode.MARK_BEGIN) == 1 and "kept" in text
