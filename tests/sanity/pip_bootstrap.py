"""Stands in for the get-pip.py that ansible-test downloads from
ci-files.testing.ansible.com (out of reach here) to put pip into its sanity
virtual environments: pip comes from the interpreter's own ensurepip and the
requested version from PyPI. tests/collection/test_lint.py seeds ansible-test's cache
with it."""

import subprocess
import sys

# get-pip.py options that pip itself does not know.
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                *(arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY)], check=True)
