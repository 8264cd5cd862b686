"""The miles trainer stand-in's entry point (/root/miles/train.py in the job image): see README.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from miles_standin.trainer import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
