#!/bin/sh
# Build the wheel of the runtime package (operator/lorarl only) and install it, with its runtime
# dependencies and nothing else, into a fresh virtualenv. The one source of the image's install
# step: the Dockerfile's builder stage RUNs this script, and tests/image/test_image.py runs it too.
#
# usage: hack/image/install.sh SOURCE_DIR VENV_DIR WHEEL_DIR
#
# The virtualenv gets no pip or setuptools of its own: the interpreter's pip installs into it
# (pip --python), so the image carries no installer. pip options come from the environment
# (PIP_NO_CACHE_DIR=1 in the image; the test keeps the pip cache).
set -eu

source_dir=$1
venv_dir=$2
wheel_dir=$3

python3 -m venv --without-pip "$venv_dir"
# the wheel of lorarl alone (--no-deps): hack/devtools (lorarl-dev) and tests/ are not in it
python3 -m pip wheel --no-deps --wheel-dir "$wheel_dir" "$source_dir"
python3 -m pip --python "$venv_dir/bin/python" install "$wheel_dir"/lorarl-*.whl
python3 -m pip --python "$venv_dir/bin/python" check
