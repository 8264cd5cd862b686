import sys

# `--phases realnode` is the real node's phase (bench/realnode.py): a control plane of its own
# with one real node, one machine-wide; the other phases run on the plain control plane
if "--phases" in sys.argv and sys.argv[sys.argv.index("--phases") + 1 :][:1] == ["realnode"]:
    from .realnode import main as realnode_main

    sys.exit(realnode_main([a for a in sys.argv[1:] if a not in ("--phases", "realnode")]))

from .run import main  # noqa: E402

sys.exit(main())
