"""What the set asks for: the set over its class (parameters, images, and
the violations of the class's rules), the warm buffer, the scale-down
cooldown, and the rollout of a changed template."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)

DEFAULT_SCALE_DOWN_COOLDOWN = "5m"


class Wanted:
    """The set over its class, as far as one plan needs it."""

    def __init__(self, exporter_set, virtual_target_class, options):
        spec = exporter_set.get("spec") or {}
        class_spec = virtual_target_class.get("spec") or {}
        self.provisioner = class_spec.get("provisioner")
        # The set over its class, with every field that receives or directs the
        # class's credentials as the class has it; the set's attempts to change
        # them are violations, and nothing is created while there are any.
        resolved = resolve(virtual_target_class, exporter_set)
        self.parameters, self.images = resolved["parameters"], resolved["images"]
        self.redirects, self.redirect_reason = resolved["violations"], resolved["reason"]
        validation = validate_parameters(self.provisioner, self.parameters)
        self.errors = list(validation["errors"]) + resolved["errors"]
        self.warnings = validation["warnings"] + resolved["warnings"]
        try:
            self.cooldown = parse_duration(spec.get("scaleDownCooldown") or DEFAULT_SCALE_DOWN_COOLDOWN)
        except ValueError:
            self.errors.append(f"spec.scaleDownCooldown: {spec.get('scaleDownCooldown')!r} is not a "
                               "duration")
            self.cooldown = parse_duration(DEFAULT_SCALE_DOWN_COOLDOWN)
        waits_for_consumer = class_spec.get("bindingMode") == c.BINDING_WAIT_FOR_FIRST_CONSUMER
        self.warm_buffer = 0 if waits_for_consumer else (spec.get("minAvailableReplicas") or 0)
        if waits_for_consumer and (options.get("policy") or {}).get("leaseWait"):
            self.warnings.append("ExporterSetPolicy spec.leaseWait: ignored: the class binds on first consumer "
                                 "(bindingMode WaitForFirstConsumer), so the set keeps no warm buffer to size")
        # Rollout of changes (rollout.py): what a new Exporter is made from, and
        # whether outdated ones are replaced (never while the set is invalid:
        # nothing could be made in their place).
        self.template_hash = rollout.template_hash(virtual_target_class, exporter_set,
                                                   self.parameters, self.images)
        self.strategy, self.max_unavailable = rollout.settings(options.get("policy"))
        self.rolling = self.strategy != rollout.ROLLOUT_NONE and not (self.errors or self.redirects)

    @property
    def invalid(self):
        return bool(self.errors or self.redirects)

    def replaced_not_reset(self, member, why):
        """An outdated member is replaced, not reset in place, while rolling."""
        if (self.rolling and why == c.RECYCLE_IN_PLACE_REUSE
                and rollout.outdated(member.annotations, self.template_hash)):
            return c.DELETE_RECYCLE
        return why
