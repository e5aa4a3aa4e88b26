# Shared settings for the project's scripts. Source it; do not run it.
# shellcheck shell=bash
PROJECT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${JVE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jumpstarter-virtual-exporters}"
VENV_DIR="$CACHE_DIR/venv"
# The collection must sit at ansible_collections/<namespace>/<name> to be
# found by Ansible and imported by Python; the link lives in the checkout.
COLLECTIONS_DIR="$PROJECT_ROOT/.cache/collections"
export PROJECT_ROOT CACHE_DIR VENV_DIR COLLECTIONS_DIR

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

link_collection() {
    local target="$COLLECTIONS_DIR/ansible_collections/jumpstarter/virtual_exporters"
    mkdir -p "$(dirname "$target")"
    ln -sfn "$PROJECT_ROOT" "$target"
    export ANSIBLE_COLLECTIONS_PATH="$COLLECTIONS_DIR"
    # The operator and the exporter-side driver come from this checkout too:
    # the Python environment is shared by every checkout of the machine, and
    # its editable installs point at the one that built it.
    export PYTHONPATH="$COLLECTIONS_DIR:$PROJECT_ROOT/operator:$PROJECT_ROOT/drivers/jumpstarter-driver-virtual-qemu${PYTHONPATH:+:$PYTHONPATH}"
}
