#!/bin/sh
# Build the wheel of the runtime package (operator/lorarl only) and install it, with its runtime
# dependencies and nothing else, into a fresh virtualenv. The one source of the image's install
# step: the Dockerfile's builder stage RUNs this script, and tests/image/test_image.py runs it too.
#
# usage: hack/image/install.sh SOURCE_DIR VENV_DIR WHEEL_DIR [EXPORTER_VENV_DIR]
#
# With EXPORTER_VENV_DIR, a second virtualenv gets the export pod's stores (botocore, oras, huggingface_hub: the
# pins of hack/image/exporter-requirements.txt) and nothing of lorarl's: botocore requires
# python-dateutil<3 and the kubernetes client >=3, so they cannot share one environment.
#
# The virtualenv gets no pip or setuptools of its own: the interpreter's pip installs into it
# (pip --python), so the image carries no installer. pip options come from the environment
# (PIP_NO_CACHE_DIR=1 in the image; the test keeps the pip cache).
#
# An interpreter without a pip of its own (Debian's python3 without python3-pip, as in the base
# `lorarl-dev images` makes from Debian packages) gets a throwaway one: the standard library's
# ensurepip into a scratch virtualenv outside VENV_DIR (pip >= 22.3 has --python; Debian
# bookworm's ensurepip brings 23.0.1). The venv itself is made by the system python3, so its
# python symlink points at the interpreter the final stage has too.
set -eu

source_dir=$1
venv_dir=$2
wheel_dir=$3
exporter_dir=${4:-}

if python3 -m pip --version >/dev/null 2>&1; then
  pip="python3 -m pip"
else
  pip_venv=$(mktemp -d "${TMPDIR:-/tmp}/lorarl-pip.XXXXXX")
  python3 -m venv "$pip_venv"
  pip="$pip_venv/bin/python -m pip"
fi

python3 -m venv --without-pip "$venv_dir"
# the wheel of lorarl alone (--no-deps): hack/devtools (lorarl-dev) and tests/ are not in it
$pip wheel --no-deps --wheel-dir "$wheel_dir" "$source_dir"
$pip --python "$venv_dir/bin/python" install "$wheel_dir"/lorarl-*.whl
$pip --python "$venv_dir/bin/python" check

if [ -n "$exporter_dir" ]; then
  python3 -m venv --without-pip "$exporter_dir"
  $pip --python "$exporter_dir/bin/python" install --no-deps -r "$source_dir/hack/image/exporter-requirements.txt"
  $pip --python "$exporter_dir/bin/python" check
fi
