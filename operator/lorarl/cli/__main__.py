"""``python -m lorarl.cli``: the ``lorarl`` command line."""

from . import main

main()
