"""A copy of the collection as a clean clone holds it, for the tools that
need it at their own path (ansible-galaxy build, ansible-test sanity)."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_collection(destination: Path) -> Path:
    """Copies the files git would hold (tracked, or new and not ignored), so
    the caches a test run leaves in the checkout stay out."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination
