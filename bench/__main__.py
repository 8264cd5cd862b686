import sys

# `--phases realnode` is the real node's phase (bench/realnode.py): a control plane of its own
# with one real node, one machine-wide; the other phases run on the plain control plane
if "--phases" in sys.argv and sys.argv[sys.argv.index("--phases") + 1 :][:1] == ["realnode"]:
    from .realnode import main as realnode_main

    sys.exit(realnode_main([a for a in sys.argv[1:] if a not in ("--phases", "realnode")]))

# `--phases churn`: one tenant's edits against another's new jobs (bench/churn.py), on a control
# plane of its own; its figures go to docs/benchmarks-churn.json, not into the generated page
if "--phases" in sys.argv and sys.argv[sys.argv.index("--phases") + 1 :][:1] == ["churn"]:
    from .churn import main as churn_main

    sys.exit(churn_main([a for a in sys.argv[1:] if a not in ("--phases", "churn")]))

from .run import main  # noqa: E402

sys.exit(main())
