"""JSON from the API, read whatever its nesting, kept no deeper than the
operator reads.

kube-apiserver accepts objects nested up to 10,000 levels (its JSON
decoder's limit), and a tenant writes some of them: a driver's ``config``
and the set's ``parameters`` take any JSON. Python's decoder gives up at
about 1,000 levels (the interpreter's recursion limit), so one such set in
a list made the whole list unreadable: every set of the namespace, or of
the cluster, went unserved. And every walk of the object after it (deep
copies, the driver reach, the playbook's extra vars) recurses.

So ``loads`` reads with the C decoder and, when the document is nested
past what the interpreter lets it recurse (about 1,000 levels on 3.11,
1,500 on 3.12 whatever the recursion limit), cuts the text first
(``clip_text``, a linear scan without recursion); ``clip`` replaces every
container deeper than ``MAX_DEPTH`` with the string ``CLIPPED``: nothing
past it reaches the operator's code, and a set that holds ``CLIPPED`` is
refused naming the field (``clipped_paths``, pool/set_overrides.py).
"""

from __future__ import annotations

import json
import re

# What kube-apiserver's JSON decoder accepts (k8s.io/apimachinery).
API_MAX_DEPTH = 10000
# The deepest container the operator reads; a set's deepest fields are
# about 8 levels down, a driver's config a few more.
MAX_DEPTH = 64
CLIPPED = f"(nested deeper than {MAX_DEPTH} levels: not read)"


# A JSON string (escapes included) or one bracket; a bracket inside a
# string is part of the string's match.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def clip_text(data, max_depth=MAX_DEPTH):
    """The JSON text ``data`` with every container deeper than ``max_depth``
    written as the string ``CLIPPED``; what ``clip`` does to the parsed
    value, done on the text so no decoder recurses past ``max_depth``."""
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8")
    pieces, depth, cut, kept = [], 0, None, 0
    for match in _TOKEN.finditer(data):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth == max_depth + 1:
                cut = match.start()
        elif token in ("]", "}"):
            if depth == max_depth + 1 and cut is not None:
                pieces.extend((data[kept:cut], json.dumps(CLIPPED)))
                kept, cut = match.end(), None
            depth -= 1
    pieces.append(data[kept:])
    return "".join(pieces)


def loads(data):
    """``json.loads`` for any depth the API server sends, then ``clip``."""
    try:
        value = json.loads(data)
    except RecursionError:
        value = json.loads(clip_text(data))
    return clip(value)


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
