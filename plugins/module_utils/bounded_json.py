"""JSON from the API, read whatever its nesting, kept no deeper than the
operator reads.

kube-apiserver accepts objects nested up to 10,000 levels (its JSON
decoder's limit), and a tenant writes some of them: a driver's ``config``
and the set's ``parameters`` take any JSON. Python's decoder gives up at
about 1,000 levels (the interpreter's recursion limit), so one such set in
a list made the whole list unreadable: every set of the namespace, or of
the cluster, went unserved. And every walk of the object after it (deep
copies, the driver reach, the playbook's extra vars) recurses.

So ``loads`` parses any depth the API server accepts (``allow_api_depth``)
and ``clip`` replaces every container deeper than ``MAX_DEPTH`` with the
string ``CLIPPED``: nothing past it reaches the operator's code, and a set
that holds ``CLIPPED`` is refused naming the field (``clipped_paths``,
pool/set_overrides.py).
"""

from __future__ import annotations

import json
import sys

# What kube-apiserver's JSON decoder accepts (k8s.io/apimachinery).
API_MAX_DEPTH = 10000
# The deepest container the operator reads; a set's deepest fields are
# about 8 levels down, a driver's config a few more.
MAX_DEPTH = 64
CLIPPED = f"(nested deeper than {MAX_DEPTH} levels: not read)"


def allow_api_depth():
    """Let Python's JSON decoder read what the API server accepts: the C
    decoder counts each level against the recursion limit (and uses about
    0.3 KiB of the thread's stack per level: 3 MiB of a thread's 8)."""
    if sys.getrecursionlimit() < API_MAX_DEPTH + 500:
        sys.setrecursionlimit(API_MAX_DEPTH + 500)


def loads(data):
    """``json.loads`` for any depth the API server sends, then ``clip``."""
    allow_api_depth()
    return clip(json.loads(data))


def clip(value, max_depth=MAX_DEPTH):
    """``value`` with every mapping or list deeper than ``max_depth`` (the
    top level is 1) replaced by ``CLIPPED``, in place; without recursion."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        container, depth = stack.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in list(items):
            if isinstance(item, (dict, list)):
                if depth >= max_depth:
                    container[key] = CLIPPED
                else:
                    stack.append((item, depth + 1))
    return value


def clipped_paths(value, path=""):
    """The paths (``.a.b[2]``) under ``value`` where ``clip`` left ``CLIPPED``."""
    found = []
    stack = [(value, path)]
    while stack:
        container, where = stack.pop()
        if isinstance(container, dict):
            items = ((f"{where}.{key}", item) for key, item in container.items())
        elif isinstance(container, list):
            items = ((f"{where}[{index}]", item) for index, item in enumerate(container))
        else:
            continue
        for at, item in items:
            if item == CLIPPED:
                found.append(at)
            elif isinstance(item, (dict, list)):
                stack.append((item, at))
    return sorted(found)
