#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: baremetal_instances
short_description: Start, reset, stop and remove qemu-baremetal instances on a lab host
version_added: 0.1.0
description:
  - Runs on a lab server prepared by the C(lab_bootstrap) role, as the service user, with
    the Python of the exporter venv (it needs C(qemu.qmp)).
  - An instance is a directory C(<work_dir>/instances/<namespace>.<exporter>) holding the
    QEMU sockets, serial log, disk and ExporterConfig, and two supervised services, C(vm)
    (QEMU, never restarted) and C(exporter) (C(jmp run), restarted when it exits). They run
    as systemd units when systemd runs, otherwise under C(jumpstarter-supervise).
  - QEMU makes its sockets, and the exporter reaches the instance, through a short link to
    the directory, C(<work_dir>/links/<16 hex digits>); a UNIX socket's path holds at most
    107 bytes, fewer than a namespace and an Exporter name may take.
  - Each instance runs as an identity of its own (a user and group of the host's pool that
    lab_bootstrap makes), through the root-owned C(<prefix>/bin/jumpstarter-instance) the
    service user runs with C(sudo -n). The instance directory is reachable by the service
    user and that identity alone; the ExporterConfig with the token is the identity's, mode
    0400.
  - All instances of one ExporterSet on the host are handled in one run, and their state
    after the run is returned.
  - Images given by C(url) (firmware, kernel, initrd, disk) are fetched into the host's
    image cache C(<work_dir>/image-cache/sha256/<hex>), keyed by digest and shared by all
    instances on the host, and their C(digest) is verified before QEMU starts; the instance
    directory links to the cached file. An image whose digest does not match, or that cannot
    be fetched, starts nothing; the instance is C(Failed) with reason C(ImageDigestMismatch),
    C(ImageUnavailable) or C(ImageInvalid) and a message naming the url (and the expected
    digest; what the url answered is kept in the instance directory's C(image-error.json) only).
    A download stops past O(image_max_size) and its partial file is removed (C(ImageInvalid)).
  - Each instance's cached images are marked used before its fetch. After the run's fetches
    the cache is kept within O(image_cache_quota), least recently used first; never removed
    are a digest any instance directory on the host links to (whichever set's, running or
    retained), one used or downloaded in the last hour, and one whose lock is held.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.attributes.idempotent
  - jumpstarter.virtual_exporters.exporterset
options:
  parameters:
    description: The class parameters with the set's overrides deep-merged over them.
    type: dict
    default: {}
  configs:
    description:
      - ExporterConfig per Exporter name, for the instances in O(present), without its
        C(token).
    type: dict
    default: {}
  tokens:
    description:
      - Exporter token per Exporter name, put into its ExporterConfig, which the instance's
        identity alone reads (mode 0400). Never logged nor returned.
    type: dict
    default: {}
  uids:
    description:
      - Exporter UID per Exporter name, for the instances acted on. Recorded with the
        instance and reported back as C(uid). In O(present), an instance made for another UID
        (an earlier Exporter of the same name) is removed, VM and disk, and made afresh; in
        O(reset), O(remove) and O(retain) it is left alone, as is an instance recorded for
        another namespace.
    type: dict
    default: {}
  present:
    description: Exporters whose instance must run (created and started when missing).
    type: list
    elements: str
    default: []
  reset:
    description:
      - Exporters whose VM is replaced by a fresh one with a fresh disk (InPlaceReuse). A
        running QEMU keeps its open disk file, so QEMU is quit over QMP, the disk recreated
        with qemu-img (and the UEFI variable store copied afresh, for a guest booting the
        default UEFI) and QEMU started again; the exporter keeps running.
    type: list
    elements: str
    default: []
  remove:
    description: Exporters whose instance is stopped and deleted with its disk.
    type: list
    elements: str
    default: []
  retain:
    description: Exporters whose services are stopped, keeping the directory and disk.
    type: list
    elements: str
    default: []
  keep:
    description:
      - When given, every other instance of this ExporterSet on the host is removed
        (left over from Exporters that went away while the host was unreachable).
    type: list
    elements: str
  work_dir:
    description: The class's C(parameters.workDir).
    type: path
    default: /var/lib/jumpstarter-virtual
  prefix:
    description: Where lab_bootstrap installed the exporter venv, the supervisor and C(jumpstarter-instance).
    type: path
    default: /opt/jumpstarter-exporter
  lock_timeout:
    description:
      - Seconds to wait for the host's lock of this ExporterSet (C(<work_dir>/locks/<namespace>.<exporterset>.lock)),
        held by any other run acting on its instances; the run fails naming the set when it stays taken.
    type: float
    default: 300.0
  image_cache_quota:
    description:
      - Bytes the host's image cache may hold once this run has fetched its images; the
        class's C(virtualtarget.jumpstarter.dev/image-cache-quota) (C(baremetal_targets)
        returns it). Past it, unused digests go, least recently used first.
    type: int
    default: 68719476736
  image_max_size:
    description:
      - Bytes an image fetched by url may have; the class's
        C(virtualtarget.jumpstarter.dev/image-max-size) (C(baremetal_targets) returns it), as
        for the node cache. A larger one is not kept and its instance starts nothing.
    type: int
    default: 17179869184
  image_hosts:
    description:
      - Hosts an image fetch may follow a redirect to besides the url's own (C(baremetal_targets)
        returns the class's); a redirect elsewhere is refused (C(ImageInvalid)) before any connection.
    type: list
    elements: str
    default: []
requirements:
  - qemu.qmp
"""

EXAMPLES = r"""
- name: Start two instances and report every instance of the set
  jumpstarter.virtual_exporters.baremetal_instances:
    namespace: lab
    exporterset: pool
    parameters: "{{ merged_parameters }}"
    configs: "{{ configs }}"
    tokens: "{{ tokens }}"
    present: [pool-0, pool-1]
    keep: [pool-0, pool-1]
"""

RETURN = r"""
instances:
  description:
    - State of every instance of the set on the host after the run, by Exporter name
      C(phase) (Running, Pending, Failed, Unknown), C(reason), C(message), C(vm) (QMP
      C(query-status) or C(absent)), C(disk_ctime) (when the disk file was made) and
      C(uid) (the Exporter UID the instance was made for, or empty).
  returned: always
  type: dict
images_downloaded:
  description:
    - Images fetched into the host's image cache by this run, by Exporter name (names such
      as C(kernel) or C(disk)); images already in the cache are not listed.
  returned: always
  type: dict
images_pruned:
  description:
    - Names removed from the host's image cache after this run's fetches (C(sha256/<hex>),
      or a partial download's name), least recently used first.
  returned: always
  type: list
  elements: str
changed_instances:
  description: Exporter names whose instance was started, reset, stopped or removed.
  returned: always
  type: list
  elements: str
"""

import fcntl
import hashlib
import json
import os
import shlex
import stat
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    constants,
    exporterset_options,
    module_base,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes, with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import qmp as qemu_qmp
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    hosts as baremetal,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    logs as service_logs,
)

OWNER_FILE = "instance.json"
# Why the instance's images could not be used (image_fetch.ImageError.as_dict).
IMAGE_ERROR_FILE = "image-error.json"
# The instance directory and its service directories (set by the helper's
# claim, kept by mkdir under it): the service user and the instance's
# identity, neither removing what the other made.
INSTANCE_DIR_MODE = 0o3770
DIGEST_SUFFIX = ".sha256"
LOCKS_DIR = "locks"
# Instances stopped side by side in one run: each stop mostly waits (the
# exporter unregistering on SIGTERM, QEMU's quit), seconds for one.
MAX_PARALLEL_STOPS = 8
QMP_TIMEOUT = 3.0
# VM states after which the guest will not run again by itself.
DEAD_VM_STATES = ("internal-error", "guest-panicked", "shutdown", "io-error")


def _alive(pid_file):
    """The pid in a supervisor's file, if a process of the file's owner (the
    instance's identity, which wrote it) has it."""
    try:
        pid = int((_read(pid_file) or "").strip())
        return pid if os.stat(f"/proc/{pid}").st_uid == os.stat(pid_file).st_uid else None
    except (OSError, ValueError):
        return None


class Identity:
    """The services of instances, each run as its instance's own identity.

    lab_bootstrap installs a root-owned helper (C(jumpstarter-instance)) that
    the service user runs through one sudo rule: it gives an instance
    directory an identity of the host's pool, starts and stops the services
    as it (jumpstarter-supervise, or systemd units when systemd runs) and
    removes the directory with every process of its identity.
    """

    def __init__(self, prefix, run_command, systemd):
        self.helper = os.path.join(prefix, "bin", "jumpstarter-instance")
        self.run_command = run_command
        self.systemd = systemd

    def _run(self, *args):
        rc, out, err = self.run_command(["sudo", "-n", self.helper, *args])
        if rc != 0:
            raise RuntimeError(f"jumpstarter-instance {' '.join(args)}: {(err or out).strip()}")
        return out.strip()

    def claim(self, instance):
        return self._run("claim", instance)

    def state(self, service_dir, unit):
        if self.systemd:
            active = subprocess.run(["systemctl", "is-active", unit], capture_output=True,
                                    text=True).stdout.strip()
            return {"active": "running", "activating": "running", "failed": "exited"}.get(active, "absent")
        if _alive(os.path.join(service_dir, "supervise.pid")):
            return "running"
        return "exited" if os.path.exists(os.path.join(service_dir, "exit-status")) else "absent"

    def start(self, instance, service, restart_delay):
        self._run("start", instance, service, restart_delay)

    def stop(self, instance, service):
        self._run("stop", instance, service)

    def release(self, instance):
        self._run("release", instance)


class HostInstances:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.root = os.path.join(self.p["work_dir"], baremetal.INSTANCES_DIR)
        self.supervisor = Identity(self.p["prefix"], module.run_command,
                                   systemd=os.path.isdir("/run/systemd/system"))
        self.changed = []
        # Instance/<name> to what it was and what the run makes of it (--diff).
        self.changes = Changes()
        self.downloaded = {}
        self.cache = os.path.join(self.p["work_dir"], image_fetch.CACHE_DIR_NAME)
        # Digests this run's instances fetched or found in the cache.
        self.fetched = set()

    # -- layout --------------------------------------------------------------
    def directory(self, name):
        return baremetal.instance_dir(self.p["work_dir"], self.p["namespace"], name)

    def link(self, name):
        """The instance directory's short path, which QEMU and the exporter are
        given (``baremetal.instance_link``)."""
        return baremetal.instance_link(self.p["work_dir"], self.p["namespace"], name)

    def _make_link(self, name):
        """The link to the instance directory, made (or pointed back) in the
        service user's links directory, which the identities may only cross."""
        links = os.path.join(self.p["work_dir"], baremetal.LINKS_DIR)
        os.makedirs(links, mode=0o711, exist_ok=True)
        link, directory = self.link(name), self.directory(name)
        if os.path.islink(link) and os.readlink(link) == directory:
            return
        made = os.path.join(links, f".new-{os.getpid()}-{os.path.basename(link)}")
        os.symlink(directory, made)
        os.replace(made, link)

    def qmp_socket(self, name):
        """QMP's socket, through the instance's link (an instance made before
        links were: in its directory)."""
        link = self.link(name)
        return os.path.join(link if os.path.islink(link) else self.directory(name), qemu_argv.QMP_SOCKET)

    def _remove_link(self, name):
        link = self.link(name)
        if os.path.islink(link) and os.readlink(link) == self.directory(name):
            os.unlink(link)

    def unit(self, service, name):
        return f"jumpstarter-{service}@{self.instance(name)}.service"

    def instance(self, name):
        return baremetal.instance_id(self.p["namespace"], name)

    def claimed(self, name):
        """Whether the instance's directory has an identity of its own (its
        group is not the service user's)."""
        return os.stat(self.directory(name)).st_gid != os.getegid()

    def own_instances(self):
        """Exporter names of this set's instance directories on the host."""
        names = []
        for entry in sorted(os.listdir(self.root)) if os.path.isdir(self.root) else ():
            try:
                with open(os.path.join(self.root, entry, OWNER_FILE)) as owner_file:
                    owner = json.load(owner_file)
            except (OSError, ValueError):
                continue
            if (owner.get("namespace"), owner.get("exporterset")) == (
                    self.p["namespace"], self.p["exporterset"]):
                names.append(owner["exporter"])
        return names

    def _owner(self, name):
        try:
            with open(os.path.join(self.directory(name), OWNER_FILE)) as owner_file:
                owner = json.load(owner_file)
        except (OSError, ValueError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def _owner_uid(self, name):
        return self._owner(name).get("uid") or ""

    def _meant(self, name):
        """Whether the instance at ``name``'s directory is the one this run is meant
        to act on: recorded for this namespace and Exporter name, and for the
        Exporter UID given in ``uids`` (an instance made for another Exporter,
        an earlier one of this name, is left to ``present`` and ``keep``).
        A directory without a readable record is not known to be anyone's and
        is taken as this Exporter's (what an interrupted ``present`` leaves)."""
        owner = self._owner(name)
        if not owner:
            return True
        if (owner.get("namespace"), owner.get("exporter")) != (self.p["namespace"], name):
            return False
        uid, made_for = self.p["uids"].get(name, ""), owner.get("uid") or ""
        return not (uid and made_for and uid != made_for)

    def was(self, name):
        """The instance as a diff shows it before the run: absent, retained or present."""
        directory = self.directory(name)
        if not os.path.isdir(directory):
            return {"state": "absent"}
        return {"state": "retained" if os.path.exists(os.path.join(directory, "retained")) else "present"}

    def _record(self, name, before, **after):
        self.changes.record(f"Instance/{name}", before, after)

    # -- state ---------------------------------------------------------------
    def service_state(self, name, service):
        return self.supervisor.state(os.path.join(self.directory(name), service),
                                     self.unit(service, name))

    def state(self, name):
        directory = self.directory(name)
        disk = os.path.join(directory, qemu_argv.DISK_IMAGE)
        result = {"phase": constants.INSTANCE_UNKNOWN, "reason": "", "message": "", "vm": "absent",
                  "disk_ctime": os.stat(disk).st_ctime if os.path.exists(disk) else None,
                  "uid": self._owner_uid(name)}
        if os.path.exists(os.path.join(directory, "retained")):
            result.update(reason="Retained", message="stopped, disk kept")
            return result
        image_error = _read(os.path.join(directory, IMAGE_ERROR_FILE))
        if image_error:
            error = json.loads(image_error)
            result.update(phase=constants.INSTANCE_FAILED, reason=error["reason"],
                          message=error["message"])
            return result
        vm_service = self.service_state(name, "vm")
        exporter_service = self.service_state(name, "exporter")
        status = None
        if vm_service == "running":
            status = qemu_qmp.vm_status(self.qmp_socket(name), timeout=QMP_TIMEOUT)
            result["vm"] = status["status"] if status else "absent"
        if vm_service != "running":
            exit_status = _read(os.path.join(directory, "vm", "exit-status"))
            result.update(phase=constants.INSTANCE_FAILED, reason="VMExited",
                          message=f"QEMU is not running (exit status {exit_status or 'unknown'})")
        elif exporter_service != "running":
            result.update(phase=constants.INSTANCE_FAILED, reason="ExporterExited",
                          message="the exporter service is not running")
        elif status is None:
            result.update(phase=constants.INSTANCE_PENDING, reason="Starting",
                          message="QMP does not answer yet")
        elif status["status"] in DEAD_VM_STATES:
            result.update(phase=constants.INSTANCE_FAILED, reason="VMStopped",
                          message=f"VM state {status['status']}")
        else:
            result.update(phase=constants.INSTANCE_RUNNING)
        return result

    # -- actions -------------------------------------------------------------
    def _write(self, path, content, mode):
        if _read(path) == content and (os.stat(path).st_mode & 0o777) == mode:
            return False
        if not self.module.check_mode:
            _replace(path, content, mode)
        return True

    def _write_config(self, path, content):
        """The ExporterConfig: the helper hands it to the instance's identity
        (0400) when the exporter starts, so whether it changed is read from
        its digest beside it (the service user's)."""
        digest = hashlib.sha256(content.encode()).hexdigest()
        if os.path.exists(path) and _read(path + DIGEST_SUFFIX) == digest:
            return False
        if not self.module.check_mode:
            _replace(path, content, 0o640)
            _replace(path + DIGEST_SUFFIX, digest, 0o600)
        return True

    def _accel(self, directory):
        if not qemu_argv.wants_kvm(self.p["parameters"]):
            return qemu_argv.ACCEL_TCG
        # The guest's own kernel, fetched or local, shows whether KVM really runs it.
        kernel = qemu_argv.image_path(self.p["parameters"], "kernel", directory)
        return qemu_qmp.probe_accel(self.p["parameters"], kernel=kernel)

    def _run_scripts(self, name):
        directory = self.directory(name)
        if not self.module.check_mode:
            self._make_link(name)
        vm_argv = qemu_argv.qemu_argv(self.p["parameters"], run_dir=directory, name=name,
                                      accel=self._accel(directory), socket_dir=self.link(name))
        jmp = os.path.join(self.p["prefix"], "venv", "bin", "jmp")
        config = os.path.join(directory, baremetal.EXPORTER_CONFIG_FILE)
        # The guest's serial log and each service's output stay bounded (provisioners/qemu_baremetal/logs.py).
        return {
            "vm": service_logs.run_script(vm_argv, [os.path.join(directory, qemu_argv.SERIAL_LOG),
                                                    os.path.join(directory, "vm", "log")]),
            "exporter": service_logs.run_script([jmp, "run", "--exporter-config", config],
                                                [os.path.join(directory, "exporter", "log")]),
        }

    def _create_disk(self, name):
        self._make_file(name, qemu_argv.disk_create_argv(self.p["parameters"], self.directory(name)),
                        qemu_argv.DISK_IMAGE)

    def _create_uefi_vars(self, name):
        """The UEFI variable store of a guest booting the default UEFI."""
        self._make_file(name, qemu_argv.uefi_vars_argv(self.p["parameters"], self.directory(name)),
                        qemu_argv.UEFI_VARS)

    def _make_file(self, name, argv, file_name):
        """Runs ``argv`` (None: nothing to make), which writes the instance's
        ``file_name``."""
        if argv is None:
            return
        target = os.path.join(self.directory(name), file_name)
        # Made under a name of its own and moved in: the instance's identity
        # may write in its directory, and a link it put at the file's name
        # would have qemu-img write where it points.
        descriptor, made = tempfile.mkstemp(dir=self.directory(name), prefix=".made-")
        os.close(descriptor)
        argv = [made if arg == target else arg for arg in argv]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(made)
            self.module.fail_json(msg=f"{name}: {shlex.join(argv)}: {result.stderr.strip()}")
        os.chmod(made, 0o660)
        os.replace(made, target)

    def present(self, name):
        config = self.p["configs"].get(name)
        token = self.p["tokens"].get(name)
        if config is None or token is None:
            self.module.fail_json(msg=f"{name}: configs and tokens need an entry for it")
        config = dict(config, token=token)
        directory = self.directory(name)
        before = self.was(name)
        written = []
        uid = self.p["uids"].get(name, "")
        made_for = self._owner_uid(name)
        if (uid and made_for and made_for != uid) or (os.path.isdir(directory) and not self.claimed(name)):
            # Made for an earlier Exporter of this name, or without an identity
            # of its own: its VM and disk go with it.
            self.remove([(name, False)])
        if not os.path.isdir(directory):
            if self.module.check_mode:
                self.changed.append(name)
                self._record(name, before, state="present", written=["the instance, afresh"])
                return
            os.makedirs(directory, mode=0o700)
            self.supervisor.claim(self.instance(name))
            written.append("directory")
        owner = {"namespace": self.p["namespace"], "exporterset": self.p["exporterset"],
                 "exporter": name, "uid": uid}
        if self._write(os.path.join(directory, OWNER_FILE), json.dumps(owner, sort_keys=True), 0o600):
            written.append(OWNER_FILE)
        # What a diff names of the config is its file, never its content (the token).
        config_changed = self._write_config(os.path.join(directory, baremetal.EXPORTER_CONFIG_FILE),
                                            json.dumps(config, indent=2, sort_keys=True))
        if config_changed:
            written.append(baremetal.EXPORTER_CONFIG_FILE)
        for service, script in self._run_scripts(name).items():
            service_dir = os.path.join(directory, service)
            if not self.module.check_mode and not os.path.isdir(service_dir):
                os.mkdir(service_dir)
                os.chmod(service_dir, INSTANCE_DIR_MODE)
            if self._write(os.path.join(service_dir, "run"), script, 0o750):
                written.append(f"{service}/run")
        changed = bool(written)
        disk = os.path.join(directory, qemu_argv.DISK_IMAGE)
        disk_missing = qemu_argv.has_disk(self.p["parameters"]) and not os.path.exists(disk)
        vars_missing = (qemu_argv.uefi_firmware(self.p["parameters"]) is not None
                        and not os.path.exists(os.path.join(directory, qemu_argv.UEFI_VARS)))
        if os.path.exists(os.path.join(directory, IMAGE_ERROR_FILE)):
            # Its images were refused: nothing starts until the instance is replaced.
            return
        if self.service_state(name, "vm") != "running" and not self.module.check_mode:
            if not self._fetch_images(name):
                if name not in self.changed:
                    self.changed.append(name)
                return
        for service in ("vm", "exporter"):
            state = self.service_state(name, service)
            restart = config_changed if service == "exporter" else False
            if state == "running" and not restart:
                continue
            changed = True
            written.append(f"{service} service {'restarted' if state == 'running' else 'started'}")
            if self.module.check_mode:
                continue
            if state == "running":
                self.supervisor.stop(self.instance(name), service)
            if service == "vm" and disk_missing:
                self._create_disk(name)
            if service == "vm" and vars_missing:
                self._create_uefi_vars(name)
            self.supervisor.start(self.instance(name), service, baremetal.SERVICE_RESTART_DELAY[service])
        if changed and name not in self.changed:
            self.changed.append(name)
        if changed:
            self._record(name, before, state="present", written=written)

    def _fetch_images(self, name):
        """Images given by url, verified in the host cache and linked into the instance.

        False (with the reason recorded in the instance) when one cannot be used.
        """
        files = qemu_argv.runtime_files(self.p["parameters"], self.directory(name))
        own = image_fetch.entry_digests(files)
        # Under each digest's lock, before it is checked: a prune of another
        # run that has not removed it yet finds it used.
        image_fetch.mark_used(self.cache, own)
        try:
            downloaded = image_fetch.fetch_all(files, self.cache, max_bytes=self.p["image_max_size"],
                                                 hosts=self.p["image_hosts"])
        except image_fetch.ImageError as error:
            self._write(os.path.join(self.directory(name), IMAGE_ERROR_FILE),
                        json.dumps(error.as_dict(), sort_keys=True), 0o600)
            return False
        self.fetched.update(own)
        if downloaded:
            self.downloaded[name] = downloaded
        return True

    def prune_cache(self):
        """After this run's fetches, the host's cache within its quota. Every
        digest an instance directory on the host links to stays (any set's:
        QEMU reads its images through those links)."""
        if not self.fetched:
            return []
        keep = self.fetched | image_fetch.linked_digests(self.root, self.cache,
                                                         qemu_argv.FETCHED_IMAGE_NAMES.values())
        return image_fetch.prune_cache(self.cache, self.p["image_cache_quota"], keep=keep)

    def _stop(self, name, services=("exporter", "vm")):
        stopped = False
        for service in services:
            if self.service_state(name, service) != "running":
                continue
            stopped = True
            if self.module.check_mode:
                continue
            if service == "vm":
                # A clean quit lets QEMU flush the disk before the process goes;
                # whatever goes wrong with it, stopping the service below ends QEMU.
                try:
                    qemu_qmp.control_vm(self.qmp_socket(name), "quit", timeout=QMP_TIMEOUT)
                except Exception:  # noqa: BLE001
                    pass
            self.supervisor.stop(self.instance(name), service)
        return stopped

    def remove(self, going):
        """Stop and delete the instances of ``going``, (name, checked) pairs in
        order; ``checked``: only when it is the instance meant (``_meant``).

        The stops run side by side: each waits seconds on its exporter
        unregistering and QEMU quitting, and nothing of one instance is
        another's. The first error is raised once every stop has ended.
        """
        names = []
        for name, checked in going:
            if name in names or not os.path.isdir(self.directory(name)):
                continue
            if checked and not self._meant(name):
                continue
            names.append(name)
            self._record(name, self.was(name), state="absent")
        self.changed.extend(names)
        if self.module.check_mode or not names:
            return
        with ThreadPoolExecutor(max_workers=min(len(names), MAX_PARALLEL_STOPS)) as pool:
            futures = [pool.submit(self._stop_and_delete, name) for name in names]
        for future in futures:
            future.result()

    def _stop_and_delete(self, name):
        self._stop(name)
        self.supervisor.release(self.instance(name))
        self._remove_link(name)

    def reset(self, name):
        directory = self.directory(name)
        if not os.path.isdir(directory):
            self.module.fail_json(msg=f"{name}: no instance on this host to reset")
        if not self._meant(name):
            # Another Exporter's instance: left alone; its report shows whose it is.
            return
        self.changed.append(name)
        self._record(name, self.was(name), state="present", written=["a fresh disk", "vm service restarted"])
        if self.module.check_mode:
            return
        self._stop(name, services=("vm",))
        self._create_disk(name)
        self._create_uefi_vars(name)
        self.supervisor.start(self.instance(name), "vm", baremetal.SERVICE_RESTART_DELAY["vm"])

    def retain(self, name):
        directory = self.directory(name)
        if not os.path.isdir(directory) or not self._meant(name):
            return
        marker = os.path.join(directory, "retained")
        before = self.was(name)
        if self._stop(name) or not os.path.exists(marker):
            self.changed.append(name)
            self._record(name, before, state="retained")
            if not self.module.check_mode:
                _replace(marker, "", 0o600)


def _replace(path, content, mode):
    """``path`` holds ``content`` with ``mode``, written under a fresh name and
    moved in (never through a link someone else put at ``path``)."""
    descriptor, made = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".new-")
    with os.fdopen(descriptor, "w") as handle:
        handle.write(content)
        os.fchmod(handle.fileno(), mode)
    os.replace(made, path)


def _read(path):
    """A regular file's text, else None; the instance's identity writes some
    of them, so a FIFO or a device there is not waited on."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(descriptor) as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        try:
            text = handle.read()
        except (OSError, ValueError):
            return None
    return text.strip() if path.endswith("exit-status") else text


def set_lock(module):
    """The host's lock of one ExporterSet: one run at a time acts on its
    instances, whichever operator (or person) started it. Waits up to
    ``lock_timeout`` seconds, then fails naming the set."""
    p = module.params
    directory = os.path.join(p["work_dir"], LOCKS_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, baremetal.instance_id(p["namespace"], p["exporterset"]) + ".lock")
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    deadline = time.monotonic() + p["lock_timeout"]
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(descriptor)
                module.fail_json(msg=f"another run acts on the instances of ExporterSet {p['namespace']}/"
                                     f"{p['exporterset']} on this host: its lock {path} was not free "
                                     f"within {p['lock_timeout']:g} s")
            time.sleep(0.1)


_NAMES = dict(type="list", elements="str", default=[])
ARGUMENT_SPEC = dict(
    **exporterset_options.SET_NAME,
    parameters=dict(type="dict", default={}),
    configs=dict(type="dict", default={}),
    tokens=dict(type="dict", default={}, no_log=True),
    uids=dict(type="dict", default={}),
    present=_NAMES,
    reset=_NAMES,
    remove=_NAMES,
    retain=_NAMES,
    keep=dict(type="list", elements="str"),
    work_dir=dict(type="path", default=baremetal.DEFAULT_WORK_DIR),
    prefix=dict(type="path", default=baremetal.DEFAULT_PREFIX),
    lock_timeout=dict(type="float", default=300.0),
    image_cache_quota=dict(type="int", default=image_fetch.DEFAULT_CACHE_QUOTA_BYTES),
    image_max_size=dict(type="int", default=image_fetch.DEFAULT_MAX_BYTES),
    image_hosts=dict(type="list", elements="str", default=[]),
)


def run(module):
    host = HostInstances(module)
    p = module.params
    lock = set_lock(module)
    try:
        going = []
        if p["keep"] is not None:
            wanted = set(p["keep"]) | set(p["present"]) | set(p["reset"])
            going += [(name, False) for name in host.own_instances() if name not in wanted]
        host.remove(going + [(name, True) for name in p["remove"]])
        for name in p["retain"]:
            host.retain(name)
        for name in p["reset"]:
            host.reset(name)
        for name in p["present"]:
            host.present(name)
        pruned = host.prune_cache()
    except (OSError, RuntimeError) as error:
        module.fail_json(msg=str(error), changed_instances=host.changed)
    instances = {name: host.state(name) for name in host.own_instances()}
    os.close(lock)
    module.exit_json(**with_diff(module, dict(
        changed=bool(host.changed or pruned), changed_instances=host.changed, instances=instances,
        images_downloaded=host.downloaded, images_pruned=pruned), host.changes.before, host.changes.after))


def main():
    module_base.main(run, ARGUMENT_SPEC, requires=("qemu.qmp", qemu_qmp.QMP_IMPORT_ERROR))


if __name__ == "__main__":
    main()
