"""Deep merge of class and set parameters (JEP-0014 "Dictionary-Based Parameters")."""

IMAGE_ROLES = ("exporter", "runtime")


def deep_merge(base, override):
    """Merge ``override`` over ``base`` and return a new dict.

    Maps merge recursively; scalars and lists from ``override`` replace the
    value at that path (lists are not concatenated). A ``None`` value in
    ``override`` removes the key, as in a JSON merge patch (RFC 7386): it is
    the only way for a set to drop a class default. A ``None`` base or
    override counts as an empty map. Neither input is mutated; values taken
    from the inputs are copied where they are containers, so the result can
    be changed freely.
    """
    base = base or {}
    override = override or {}
    if not isinstance(base, dict) or not isinstance(override, dict):
        raise TypeError("deep_merge expects two mappings")
    merged = {key: _copy(value) for key, value in base.items()}
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = _strip_nulls(value)
    return merged


def merge_images(class_images, set_images):
    """Image overrides for the exporter and runtime containers.

    Follows JEP-0014 "Image Overrides": an ``ImageSpec`` given on the set
    replaces the class's ``ImageSpec`` for that role as a whole (the fields
    inside are not mixed), so the Go controller and this collection render
    the same images for the same objects. Roles the set leaves out are
    inherited from the class. Roles nobody sets are absent (the provisioner
    uses its built-in default).
    """
    class_images = class_images or {}
    set_images = set_images or {}
    merged = {}
    for role in IMAGE_ROLES:
        chosen = set_images.get(role) or class_images.get(role)
        if chosen:
            merged[role] = {k: v for k, v in chosen.items() if v is not None}
    return merged


def _copy(value):
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _strip_nulls(value):
    """Copy a value taken from the override; nulls in it mean "absent"."""
    if isinstance(value, dict):
        return {key: _strip_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_strip_nulls(item) for item in value]
    return value
