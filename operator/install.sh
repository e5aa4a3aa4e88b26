#!/bin/sh
# Installs the operator the way its image holds it (operator/Containerfile
# runs this; tests/install/test_operator_image.py runs it into a fresh venv):
#
#   operator/install.sh SOURCE COLLECTIONS_DIR
#
# SOURCE is a checkout of this repository (read only: nothing is written
# into it). Into the Python environment of $PYTHON (default python3):
#   1. the pinned dependencies of requirements.txt (ansible-core,
#      ansible-runner, kubernetes, the ansible package with kubernetes.core
#      and the other collections the roles use, ...) and all they pull in,
#      from requirements.lock with pip --require-hashes: every file pip
#      installs must have one of the hashes the lock names;
#   2. the collection, built with ansible-galaxy (galaxy.yml's build_ignore
#      applies) and installed into COLLECTIONS_DIR/ansible_collections;
#   3. the operator package (operator/pyproject.toml), without dependencies
#      (step 1 pinned them) and without build isolation: it is built with the
#      setuptools step 1 installed from the lock, so nothing unhashed is
#      fetched;
#   4. a .pth file putting COLLECTIONS_DIR on sys.path, so the operator
#      imports the pool logic from the installed collection with no
#      PYTHONPATH.
# Extra pip options (e.g. --no-index --find-links DIR) come from PIP_OPTIONS;
# pip's own environment variables apply too (the image sets PIP_NO_CACHE_DIR).
set -eu

src=${1:?usage: install.sh SOURCE COLLECTIONS_DIR}
collections=${2:?usage: install.sh SOURCE COLLECTIONS_DIR}
python=${PYTHON:-python3}
# shellcheck disable=SC2086 # PIP_OPTIONS is a list of words
pip() { "$python" -m pip install --disable-pip-version-check ${PIP_OPTIONS:-} "$@"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pip --require-hashes -r "$src/requirements.lock"

"$python" -m ansible.cli.galaxy collection build --output-path "$work/dist" "$src" >/dev/null
mkdir -p "$collections"
# The collections it depends on came with the ansible package in step 1.
"$python" -m ansible.cli.galaxy collection install --no-deps --force -p "$collections" \
    "$work"/dist/*.tar.gz >/dev/null

# pip builds a local project in its own directory: build from a copy.
cp -R "$src/operator" "$work/operator"
rm -rf "$work"/operator/*.egg-info "$work/operator/build"
pip --no-deps --no-build-isolation "$work/operator"

site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
(cd "$collections" && pwd) >"$site/jumpstarter-virtual-exporters.pth"
