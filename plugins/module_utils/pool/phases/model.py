"""The typed scale plan: its steps, the ``Plan`` itself, and the ``Draft`` the phases fill.

Outside the planner a plan travels as a plain dict (Ansible passes it
between tasks as JSON, the applier and the playbooks read it): ``to_dict``
gives that shape and ``from_dict`` reads it back, once at each edge.
"""

from dataclasses import dataclass, field, fields

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
)


@dataclass(slots=True)
class NewExporter:
    """An Exporter to create: its name, labels and annotations."""

    name: str
    labels: dict
    annotations: dict

    def to_dict(self):
        return {"name": self.name, "labels": self.labels, "annotations": self.annotations}

    @classmethod
    def from_dict(cls, entry):
        return cls(entry["name"], entry.get("labels") or {}, entry.get("annotations") or {})


@dataclass(slots=True)
class Removal:
    """An owned Exporter to delete, and why; the UID keeps a namesake safe.
    A dormant Exporter's removal has no reason."""

    name: str
    reason: str | None = None
    uid: str | None = None

    @classmethod
    def of(cls, exporter, reason=None):
        metadata = exporter["metadata"]
        return cls(metadata["name"], reason, metadata.get("uid") or None)

    def to_dict(self):
        return _named(self.name, self.uid, reason=self.reason)

    @classmethod
    def from_dict(cls, entry):
        return cls(entry["name"], entry.get("reason"), entry.get("uid"))


@dataclass(slots=True)
class Reset:
    """An Exporter whose instance is reset in place, then enabled again."""

    name: str
    strategy: str
    uid: str | None = None

    def to_dict(self):
        return _named(self.name, self.uid, strategy=self.strategy)

    @classmethod
    def from_dict(cls, entry):
        return cls(entry["name"], entry.get("strategy"), entry.get("uid"))


def _named(name, uid, **values):
    """An entry naming one Exporter: its name, the values given that are not
    None, and its UID when it has one."""
    entry = {"name": name, **{key: value for key, value in values.items() if value is not None}}
    if uid:
        entry["uid"] = uid
    return entry


@dataclass(slots=True)
class Event:
    """An Event to write on the set, about one of its Exporters or about the set."""

    type: str
    reason: str
    message: str
    exporter: str | None = None

    def to_dict(self):
        if self.exporter is None:
            return {"type": self.type, "reason": self.reason, "message": self.message}
        return {"type": self.type, "reason": self.reason, "message": self.message, "exporter": self.exporter}

    @classmethod
    def from_dict(cls, event):
        return cls(event.get("type"), event.get("reason"), event.get("message"), event.get("exporter"))


# The plan's actions on Exporters and on the set: any of them makes it a change.
ACTIONS = ("adopt", "create", "enable", "disable", "delete", "recycle", "create_dormant", "delete_dormant",
           "exporter_annotations", "set_state")
_ENTRY_TYPES = {"create": NewExporter, "create_dormant": NewExporter, "delete": Removal,
                "delete_dormant": Removal, "recycle": Reset, "events": Event}


@dataclass(slots=True)
class BackendWork:
    """The part of a plan that a provisioner's role carries out: the deletes
    that need the backend first, the resets in place, and their annotations
    and Events."""

    delete: list = field(default_factory=list)
    recycle: list = field(default_factory=list)
    exporter_annotations: dict = field(default_factory=dict)
    events: list = field(default_factory=list)

    def names(self):
        return [entry.name for entry in self.delete + self.recycle]

    def to_dict(self):
        return {
            "delete": [entry.to_dict() for entry in self.delete],
            "recycle": [entry.to_dict() for entry in self.recycle],
            "exporter_annotations": self.exporter_annotations,
            "events": [event.to_dict() for event in self.events],
        }


@dataclass(slots=True)
class Plan:
    """What one reconcile of a set does (pool/plan.py says in which order).

    ``previous_status`` is the set's status the plan was made against: the
    plan is a change when it acts or writes another status (``changed``).
    ``adopt`` (unowned Exporters the set takes, pool/adoption.py) is added
    after the planner, and shown only when there is a list. ``extra`` keeps
    keys others added to a plan's dict (``paused``) across ``from_dict`` and
    ``to_dict``.
    """

    previous_status: dict
    status: dict
    target: int | None = None
    create: list = field(default_factory=list)
    enable: list = field(default_factory=list)
    disable: list = field(default_factory=list)
    delete: list = field(default_factory=list)
    recycle: list = field(default_factory=list)
    create_dormant: list = field(default_factory=list)
    delete_dormant: list = field(default_factory=list)
    exporter_annotations: dict = field(default_factory=dict)
    # A patch of the set's operator state (pool/operator_state.py), written
    # with its status.
    set_state: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    requeue_after: float | None = None
    parameters: dict | None = None
    images: dict | None = None
    warnings: list = field(default_factory=list)
    adopt: list | None = None
    extra: dict = field(default_factory=dict)

    def changed(self):
        """Whether applying the plan writes anything (Events alone are not a change)."""
        return bool(any(getattr(self, key) for key in ACTIONS)
                    or (self.status and self.status != self.previous_status))

    def split(self, removed_with_exporter, acting=()):
        """The pool's part of the plan and the backends' part (None when there is none).

        The pool's part decides the pool and touches no backend: Exporters
        created, enabled and disabled, the deletes of Exporters whose instance
        goes with them (``removed_with_exporter``: the provisioner's instance
        is its Pod), annotations, the set's status and Events; it is written
        at once. The backends' part (resets in place, the deletes that need
        the provisioner's role first) goes to the reconcile playbook.
        Exporters in ``acting`` (a backend run is at work on them) are left
        out of the pool's part.
        """
        acting = set(acting)
        backend = BackendWork(
            delete=[d for d in self.delete if not removed_with_exporter and d.name not in acting],
            recycle=[r for r in self.recycle if r.name not in acting])
        backend_names = set(backend.names())
        held_back = acting | backend_names
        pool = Plan(**{f.name: getattr(self, f.name) for f in fields(self)})
        pool.delete = [d for d in self.delete if removed_with_exporter and d.name not in acting]
        pool.recycle = []
        pool.enable = [n for n in self.enable if n not in acting]
        pool.disable = [n for n in self.disable if n not in acting]
        pool.exporter_annotations = {n: a for n, a in self.exporter_annotations.items()
                                     if n not in held_back}
        # An Event about an Exporter left to the backends is written by the run
        # that acts on it, once, not by every pool pass while it waits.
        pool.events = [e for e in self.events if e.exporter not in held_back]
        if not backend_names:
            return pool, None
        backend.exporter_annotations = {n: a for n, a in self.exporter_annotations.items()
                                        if n in backend_names}
        backend.events = [e for e in self.events if e.exporter in backend_names]
        return pool, backend

    def to_dict(self):
        """The plan as modules return it and playbooks read it."""
        return {
            "target": self.target,
            "create": [entry.to_dict() for entry in self.create],
            "enable": list(self.enable),
            "disable": list(self.disable),
            "delete": [entry.to_dict() for entry in self.delete],
            "recycle": [entry.to_dict() for entry in self.recycle],
            "create_dormant": [entry.to_dict() for entry in self.create_dormant],
            "delete_dormant": [entry.to_dict() for entry in self.delete_dormant],
            "exporter_annotations": self.exporter_annotations,
            "set_state": self.set_state,
            "status": self.status,
            "events": [event.to_dict() for event in self.events],
            "requeue_after": self.requeue_after,
            "changed": self.changed(),
            "parameters": self.parameters,
            "images": self.images,
            "warnings": self.warnings,
            **({} if self.adopt is None else {"adopt": self.adopt}),
            **self.extra,
        }

    @classmethod
    def from_dict(cls, plan, exporter_set):
        """A plan's dict (``to_dict``'s shape, perhaps with keys left out) for
        ``exporter_set``; its ``changed`` is computed again, not read."""
        known = {f.name for f in fields(cls)} - {"previous_status", "extra"}
        values = {}
        for key in known:
            value = plan.get(key)
            if key in _ENTRY_TYPES:
                value = [_ENTRY_TYPES[key].from_dict(entry) for entry in value or ()]
            elif key in ("enable", "disable", "warnings"):
                value = list(value or ())
            elif key in ("exporter_annotations", "set_state"):
                value = value or {}
            elif key == "status":
                value = value or {}
            values[key] = value
        extra = {k: v for k, v in plan.items() if k not in known and k != "changed"}
        return cls(previous_status=exporter_set.get("status") or {}, extra=extra, **values)


class Draft:
    """The actions of one plan as its phases add them (``finish`` makes the Plan)."""

    def __init__(self, state, now):
        self.now_text = format_time(now)
        self.create = []
        self.enable = []
        self.disable = []
        self.delete = []
        self.recycle = []
        self.create_dormant = []
        self.delete_dormant = []
        self.exporter_annotations = {}
        # The set's operator state as planned on, and this plan's patch of it.
        self.state_values = state
        self.set_state = {}
        self.events = []
        self.requeue = []
        # Written on every Exporter it creates (rollout.py).
        self.template_hash = None

    def remove(self, exporter, reason):
        """Plan the deletion of an owned Exporter."""
        self.delete.append(Removal.of(exporter, reason))

    def annotate(self, name, key, value):
        self.exporter_annotations.setdefault(name, {})[key] = value

    def remember(self, key, value):
        """Set ``key`` of the set's operator state (None removes it)."""
        if self.state_values.get(key) != value:
            self.set_state[key] = value

    def event(self, kind, reason, message, exporter=None):
        self.events.append(Event(kind, reason, message, exporter))

    def requeue_at(self, seconds):
        self.requeue.append(max(float(seconds), 0.0))

    def finish(self, previous_status, status, target, parameters, images, warnings):
        """The Plan: entries in a stable order, and no annotation patch for an
        Exporter that is deleted."""
        leaving = {d.name for d in self.delete}
        return Plan(
            previous_status=previous_status,
            status=status,
            target=target,
            create=self.create,
            enable=sorted(self.enable),
            disable=sorted(self.disable),
            delete=sorted(self.delete, key=lambda d: d.name),
            recycle=sorted(self.recycle, key=lambda r: r.name),
            create_dormant=self.create_dormant,
            delete_dormant=self.delete_dormant,
            exporter_annotations={name: patch for name, patch in sorted(self.exporter_annotations.items())
                                  if name not in leaving},
            set_state=dict(sorted(self.set_state.items())),
            events=self.events,
            requeue_after=min(self.requeue) if self.requeue else None,
            parameters=parameters,
            images=images,
            warnings=warnings,
        )
