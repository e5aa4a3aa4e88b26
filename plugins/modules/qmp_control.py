#!/usr/bin/python
"""Ansible module: query and control a running QEMU over its QMP socket."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: qmp_control
short_description: Query, pause, resume, reset or stop a QEMU virtual target over QMP
version_added: 0.1.0
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
description:
  - Connects to the QMP UNIX socket of a running QEMU (C(<run_dir>/qmp.sock) for the
    instances of the QEMU provisioners), sends one command, and returns the VM status
    from C(query-status).
  - Idempotent. O(command=stop) on a VM that is not running, O(command=cont) on a
    running one, and O(command=quit) when nothing answers on the socket change nothing.
    O(command=reset) (C(system_reset)) always changes; QEMU keeps running and the guest
    reboots.
  - Opens a fresh QMP session per call and closes it, so the exporter can use the
    socket in between.
requirements:
  - qemu.qmp (Python, on the host that runs the module)
options:
  socket:
    description: Path of the QMP UNIX socket.
    type: path
    required: true
  command:
    description:
      - V(status) only queries.
      - V(stop) pauses the vCPUs, V(cont) resumes them.
      - V(reset) resets the machine like the reset button.
      - V(quit) ends QEMU; the module returns once nothing listens on the socket any more,
        so a QEMU on its way out that still takes a connection and drops it is waited for.
    type: str
    choices: [status, reset, stop, cont, quit]
    default: status
  timeout:
    description: Seconds the whole QMP exchange may take, the wait after V(quit) included.
    type: float
    default: 10
attributes:
  check_mode:
    description: Only queries the status and reports whether the command would change it.
    support: full
  diff_mode:
    description: Returns the status before and after.
    support: full
  idempotent:
    description: Except for O(command=reset), repeating a command changes nothing.
    support: partial
"""

EXAMPLES = r"""
- name: Is the target running?
  jumpstarter.virtual_exporters.qmp_control:
    socket: /var/lib/jumpstarter-virtual/pool-a-0/qmp.sock
  register: vm

- name: Recycle in place after a lease (InPlaceReuse)
  jumpstarter.virtual_exporters.qmp_control:
    socket: "{{ run_dir }}/qmp.sock"
    command: reset

- name: Stop QEMU before removing the instance
  jumpstarter.virtual_exporters.qmp_control:
    socket: "{{ run_dir }}/qmp.sock"
    command: quit
    timeout: 30
"""

RETURN = r"""
status:
  description:
    - QEMU run state from C(query-status) after the command, for example C(running),
      C(paused), C(prelaunch), C(internal-error); C(absent) once QEMU has quit or when
      nothing answered a O(command=quit).
    - In check mode, the state found.
  returned: always
  type: str
  sample: running
running:
  description: Whether the vCPUs run.
  returned: always
  type: bool
  sample: true
before:
  description: Run state found before the command.
  returned: always
  type: str
  sample: paused
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.ansible_compat import diff_mode
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import (
    COMMANDS,
    DEFAULT_TIMEOUT,
    QMP_IMPORT_ERROR,
    QmpUnavailable,
    control_vm,
)

ARGUMENT_SPEC = {
    "socket": {"type": "path", "required": True},
    "command": {"type": "str", "choices": list(COMMANDS), "default": "status"},
    "timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
}


def run(module):
    params = module.params
    try:
        result = control_vm(
            params["socket"], params["command"], timeout=params["timeout"],
            check_mode=module.check_mode,
        )
    except QmpUnavailable as error:
        module.fail_json(msg=str(error), status="absent", running=False, before="absent")
    except TimeoutError as error:
        # A QEMU still there after quit says so; a QMP that never answered is a bare timeout.
        module.fail_json(msg=str(error) or f"QMP on {params['socket']} did not answer within "
                                           f"{params['timeout']} s")
    except Exception as error:  # noqa: BLE001 - any QMP failure becomes a task failure
        module.fail_json(msg=f"QMP {params['command']} on {params['socket']} failed: {error}")
    if diff_mode(module):
        result["diff"] = {"before": {"status": result["before"]},
                          "after": {"status": result["status"]}}
    module.exit_json(**result)


def main():
    module_base.main(run, ARGUMENT_SPEC, requires=("qemu.qmp", QMP_IMPORT_ERROR))


if __name__ == "__main__":
    main()
