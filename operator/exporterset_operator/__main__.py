"""Command line entry point: ``exporterset-operator`` / ``python -m exporterset_operator``."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    api_client as load_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import base as provisioner_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)
from kubernetes import client

from . import cgroup, election, logs, permissions
from .controller import Controller
from .metrics import Metrics, bind_address, serve
from .reconciler import Reconciler
from .runner import ForkServer, PlaybookRunner
from .watches import SERVED, load_watches

log = logging.getLogger("exporterset_operator")

DEFAULT_PROVISIONERS = ("qemu.jumpstarter.dev",)
# How long SIGTERM waits for the reconciles in flight before the Lease is
# released; below the Pod's default terminationGracePeriodSeconds (30).
SHUTDOWN_GRACE_SECONDS = 20.0


def _collection_root() -> Path:
    """The collection the pool logic is imported from: its playbooks run too."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe

    return Path(k8s_observe.__file__).resolve().parents[3]


def duration(value: str) -> float:
    """Seconds, plain ("600") or as a Go duration ("10m")."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"negative duration: {value!r}")
    return seconds


def _replicas(value: str) -> int:
    """A replica count: a whole number >= 0."""
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"negative replica count: {value!r}")
    return count


def _bind_address(value: str) -> tuple[str, int] | None:
    """``(host, port)`` of a server, None for ``0`` (off)."""
    try:
        return bind_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# controller-runtime's --zap-log-level names, as Python's levels.
ZAP_LEVELS = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR", "dpanic": "CRITICAL",
              "panic": "CRITICAL", "fatal": "CRITICAL"}


def zap_level(value: str) -> str:
    """The Python level of a ``--zap-log-level``: a name, or a verbosity
    (``0`` info, ``1`` and up debug: Python has no finer level)."""
    name = value.strip().lower()
    if name in ZAP_LEVELS:
        return ZAP_LEVELS[name]
    if name.isdigit():
        return "INFO" if int(name) == 0 else "DEBUG"
    raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(ZAP_LEVELS)} or a verbosity >= 0")


def flag_bool(value: str) -> bool:
    """A Go boolean flag's value (``--zap-devel=false``)."""
    answer = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}.get(value.strip().lower())
    if answer is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not true or false")
    return answer


def _zap_flags(parser: argparse.ArgumentParser) -> None:
    """The logging flags of controller-runtime's zap, which a Deployment made
    for an upstream exporter-set controller may pass: level and encoder are
    ours too, the rest is accepted and has no effect."""
    parser.add_argument("--zap-log-level", type=zap_level, dest="log_level",
                        help="debug, info, warn, error, or a verbosity (1 and up: debug); same as --log-level")
    parser.add_argument("--zap-encoder", choices=("json", "console"), dest="log_encoder",
                        help="json (default) or console: one line of text per record")
    parser.add_argument("--zap-devel", type=flag_bool, nargs="?", const=True, default=False,
                        help="development defaults: level debug and the console encoder unless given")
    for name in ("--zap-stacktrace-level", "--zap-time-encoding"):
        parser.add_argument(name, help="accepted and ignored")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="exporterset-operator", description=__doc__)
    parser.add_argument(
        "--provisioner", action="append", dest="provisioners",
        help="provisioner string this Deployment serves (repeatable); "
        "classes of other provisioners are left alone. Env: PROVISIONERS (comma separated).",
    )
    parser.add_argument("--watches-file", default=env("WATCHES_FILE"),
                        help="watches.yaml (default: the one shipped in operator/)")
    parser.add_argument("--namespace", default=env("WATCH_NAMESPACE") or env("NAMESPACE") or None,
                        help="watch one namespace only, and hold the leader election Lease there "
                        "(default: all). Env: WATCH_NAMESPACE, else NAMESPACE.")
    parser.add_argument(
        "--max-concurrent-reconciles", type=int,
        default=int(env("MAX_CONCURRENT_RECONCILES", "0")) or None,
        help="reconciles in flight at once (default: the container's CPU limit, at least 1)",
    )
    parser.add_argument(
        "--max-concurrent-backend-runs", type=int,
        default=int(env("MAX_CONCURRENT_BACKEND_RUNS", "0")) or None,
        help="reconcile playbook runs (backend work) in flight at once, across all sets "
             "(default: the reconciles' bound, at least 2)",
    )
    parser.add_argument(
        "--max-replicas-per-set", type=_replicas,
        default=_replicas(env("MAX_REPLICAS_PER_SET")) if env("MAX_REPLICAS_PER_SET") else None,
        help="ceiling on the replicas of any one ExporterSet, whatever its maxReplicas (0 there "
             "means no ceiling of its own); 0: none (default 100, or watches.yaml "
             "vars.reconcile_plan_options.max_replicas_per_set). Env: MAX_REPLICAS_PER_SET.",
    )
    parser.add_argument(
        "--metrics-bind-address", type=_bind_address, default=env("METRICS_BIND_ADDRESS", "0.0.0.0:8080"),
        help="host:port of /metrics (default 0.0.0.0:8080; 127.0.0.1:8080 keeps it to the Pod; 0: no "
             "metrics); /healthz and /readyz answer there too. Env: METRICS_BIND_ADDRESS.",
    )
    parser.add_argument(
        "--health-probe-bind-address", type=_bind_address, default=env("HEALTH_PROBE_BIND_ADDRESS", ":8081"),
        help="host:port of /healthz and /readyz alone (default :8081, every address; 0: none). "
             "Env: HEALTH_PROBE_BIND_ADDRESS.",
    )
    parser.add_argument(
        "--stuck-reconcile-timeout", type=duration, default=env("STUCK_RECONCILE_TIMEOUT", "10m"),
        help="/healthz fails while one reconcile has run longer than this (default 10m; 0: never)",
    )
    parser.add_argument(
        "--watch-silence-timeout", type=duration, default=env("WATCH_SILENCE_TIMEOUT", "15m"),
        help="/healthz fails when an informer has not heard from the API server for this long "
        "(default 15m, three watch timeouts; 0: never)",
    )
    parser.add_argument("--leader-elect", action="store_true", default=env("LEADER_ELECT") == "true")
    parser.add_argument("--leader-election-id", default=env("LEADER_ELECTION_ID"))
    parser.add_argument("--leader-election-namespace", default=env("LEADER_ELECTION_NAMESPACE"))
    # The election's timings: flag (env LEADER_ELECTION_<NAME>), default, meaning.
    for name, default, meaning in (
        ("lease-duration", "15s", "how long a standby waits after the leader's last renewal before it takes over"),
        ("renew-deadline", "10s", "how long the leader retries renewing before it gives up leading "
                                  "(less than the lease duration)"),
        ("retry-period", "2s", "time between two attempts to acquire or renew (the renew deadline must "
                               "exceed 1.2 times it)"),
    ):
        parser.add_argument(f"--leader-election-{name}", type=duration,
                            default=env("LEADER_ELECTION_" + name.upper().replace("-", "_"), default),
                            help=f"{meaning} (default {default})")
    parser.add_argument("--artifacts-dir", default=env("ARTIFACTS_DIR", "/tmp/exporterset-operator"))
    parser.add_argument("--max-artifacts", type=int, default=int(env("MAX_ARTIFACTS", "0")) or None,
                        help="playbook runs whose artifacts are kept (default: maxRunnerArtifacts "
                        "of watches.yaml, 20)")
    parser.add_argument("--ansible-verbosity", type=int, default=int(env("ANSIBLE_VERBOSITY_LEVEL", "0")))
    parser.add_argument(
        "--fork-server", action=argparse.BooleanOptionalAction, default=env("FORK_SERVER", "true") != "false",
        help="fork the playbook runs from a process that has imported Ansible (default); "
             "--no-fork-server: start ansible-playbook afresh for each run. Env: FORK_SERVER=false.",
    )
    parser.add_argument(
        "--image-registry", default=env("IMAGE_REGISTRY") or provisioner_base.IMAGE_REGISTRY,
        help="where the instance Pods' images are: REGISTRY/exporter, REGISTRY/qemu-runtime, tagged "
             f"{provisioner_base.IMAGE_VERSION} (default {provisioner_base.IMAGE_REGISTRY}, where "
             "scripts/release pushes them). Env: IMAGE_REGISTRY.")
    for flag, role, variable, what in _IMAGE_FLAGS:
        parser.add_argument(flag, dest=f"{role}_image", default=env(variable),
                            help=f"{what} (default: the one under --image-registry). Env: {variable}.")
    parser.add_argument("--log-level", help="a Python level (default INFO). Env: LOG_LEVEL.")
    _zap_flags(parser)
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    args = parser.parse_args(argv)
    if args.log_level is None:
        args.log_level = "DEBUG" if args.zap_devel else env("LOG_LEVEL", "INFO")
    if args.log_encoder is None:
        args.log_encoder = "console" if args.zap_devel else "json"
    # The election's own checks, said with the flags' names (the library
    # would exit with its parameter names instead).
    for flag in ("lease_duration", "renew_deadline", "retry_period"):
        if getattr(args, "leader_election_" + flag) < 1:
            parser.error(f"--leader-election-{flag.replace('_', '-')} must be at least 1s")
    if not float(args.leader_election_lease_duration).is_integer():
        parser.error("--leader-election-lease-duration must be whole seconds (the Lease holds whole seconds), "
                     f"not {args.leader_election_lease_duration:g}s")
    args.leader_election_lease_duration = int(args.leader_election_lease_duration)
    if args.leader_election_lease_duration <= args.leader_election_renew_deadline:
        parser.error(f"--leader-election-lease-duration ({args.leader_election_lease_duration:g}s) must be "
                     f"longer than --leader-election-renew-deadline ({args.leader_election_renew_deadline:g}s)")
    if args.leader_election_renew_deadline <= 1.2 * args.leader_election_retry_period:
        parser.error(f"--leader-election-renew-deadline ({args.leader_election_renew_deadline:g}s) must be "
                     f"longer than 1.2 times --leader-election-retry-period "
                     f"({args.leader_election_retry_period:g}s)")
    if not args.provisioners:
        from_env = [p.strip() for p in env("PROVISIONERS", "").split(",") if p.strip()]
        args.provisioners = from_env or list(DEFAULT_PROVISIONERS)
    unknown = [name for name in args.provisioners if not provisioners.known(name)]
    if unknown:
        parser.error(f"unknown provisioner {', '.join(map(repr, unknown))}; "
                     f"supported: {', '.join(provisioners.names())}")
    return args


# The images an install may name one by one (a digest, a mirror of one):
# flag, image role, environment variable (OLM's RELATED_IMAGE_ form), what.
_IMAGE_FLAGS = (
    ("--exporter-image", "exporter", "RELATED_IMAGE_EXPORTER",
     "the exporter's image where neither class nor set names one"),
    ("--qemu-runtime-image", "runtime", "RELATED_IMAGE_QEMU_RUNTIME",
     "the runtime container's image where neither class nor set names one"),
    ("--image-fetch-image", provisioner_base.IMAGE_FETCH_ROLE, "RELATED_IMAGE_IMAGE_FETCH",
     "the image of the images init container, which fetches a class's images into the node's "
     "image cache (no class or set chooses it)"),
)


def pod_images(args: argparse.Namespace) -> dict:
    """The instance Pods' images by role, as the reconcile playbook takes them
    (``exporter_pod_images``)."""
    return provisioner_base.default_images(
        args.image_registry, {role: getattr(args, f"{role}_image") for _, role, _, _ in _IMAGE_FLAGS})


def election_leases(args: argparse.Namespace) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, namespace, provisioners it leads) of each leader election Lease,
    in the watched namespace (NAMESPACE in upstream's slot, whose Role grants
    Leases there alone). By default one per provisioner, the Lease upstream's
    controller of that provisioner holds (election.py);
    ``--leader-election-id`` names one Lease for all of them instead."""
    namespace = args.leader_election_namespace or args.namespace or "default"
    if args.leader_election_id:
        return [(args.leader_election_id, namespace, tuple(sorted(args.provisioners)))]
    return [(election.lease_name(p), namespace, (p,)) for p in sorted(args.provisioners)]


def standby_event(api_client, exporter_set: dict, message: str) -> None:
    """The Event a standby records on a set another controller serves."""
    k8s_status.emit_events(api_client, exporter_set, [
        {"type": "Normal", "reason": election.STANDBY_REASON, "message": message}])


def playbook_env(kubeconfig: str | None) -> dict[str, str]:
    """What the reconcile playbook needs to reach the same cluster as we do."""
    env = {"ANSIBLE_COLLECTIONS_PATH": os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")}
    if kubeconfig:
        # kubernetes.core and the collection's modules read this before KUBECONFIG.
        env["K8S_AUTH_KUBECONFIG"] = os.path.abspath(kubeconfig)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_encoder)
    # Forked now, while this process runs no other thread: the playbook
    # runs' server shares the pages of what we imported.
    fork_server = ForkServer() if args.fork_server else False
    if fork_server:
        fork_server.start()
    root = _collection_root()
    watches = load_watches(args.watches_file or root / "operator" / "watches.yaml", root=root)
    watch = watches.entry(*SERVED)
    # An install's choice, not a set's: the runs' vars carry it (roles/qemu_pod).
    watch.vars = {**watch.vars, "exporter_pod_images": pod_images(args)}
    api_client = load_client(args.kubeconfig)
    # The leader election lock builds its own API objects from the default
    # configuration.
    client.Configuration.set_default(api_client.configuration)
    workers = args.max_concurrent_reconciles or watch.max_concurrent_reconciles or cgroup.cpu_limit()
    # What the account may not do turns features off (pool/permissions.py),
    # said on every set it serves: asked once, not learnt from 403s.
    granted = permissions.probe(api_client, args.namespace, args.provisioners)
    metrics = Metrics()
    runner = PlaybookRunner(
        str(root), args.artifacts_dir, max_artifacts=args.max_artifacts or watch.max_runner_artifacts,
        verbosity=args.ansible_verbosity,
        env=playbook_env(args.kubeconfig),
        fork_server=fork_server,
    )

    # The scale plan's options: the pool logic's defaults under the entry's
    # vars, as the reconcile role run by hand takes them (k8s/lifecycle.py).
    try:
        plan_options = lifecycle.plan_options(watch.vars.get("reconcile_plan_options"),
                                              where="watches.yaml vars.reconcile_plan_options")
    except lifecycle.LifecycleError as exc:
        log.error("invalid watches.yaml", extra={"error": str(exc)})
        return 2
    if args.max_replicas_per_set is not None:
        plan_options["max_replicas_per_set"] = args.max_replicas_per_set

    # The provisioners whose Lease this process holds (all of them without
    # an election): the reconcilers act on their sets and classes alone.
    serving: set[str] = set()

    def make_reconciler(caches):
        return Reconciler(
            caches, api_client, runner, metrics, serving,
            plan_options=plan_options, watch=watch, permissions=granted,
        )

    controller = Controller(
        api_client, make_reconciler, metrics, workers=workers, namespace=args.namespace,
        resync_period=watch.reconcile_period,
        watch_dependent_resources=watch.watch_dependent_resources,
        stuck_reconcile_timeout=args.stuck_reconcile_timeout,
        watch_silence_timeout=args.watch_silence_timeout,
        backend_workers=args.max_concurrent_backend_runs,
        permissions=granted,
    )
    log.info("starting", extra={"provisioners": args.provisioners, "workers": workers,
                                "backend_runs": controller.backends.workers,
                                "namespace": args.namespace or "*"})
    # Every replica keeps its caches warm, leader or not: it is ready once
    # they are synced, and a follower that takes over starts from them.
    controller.start_informers()
    probes = {"healthy": controller.liveness, "ready": controller.readiness}
    for address, served, name in ((args.metrics_bind_address, metrics, "metrics"),
                                  (args.health_probe_bind_address, None, "probes")):
        if address is None or (name == "probes" and address == args.metrics_bind_address):
            continue  # off, or answered by the metrics server
        try:
            serve(*address, served, name=name, **probes)
        except OSError as exc:
            log.error("cannot listen", extra={"server": name, "address": "{}:{}".format(*address), "error": str(exc)})
            return 2

    stopped = threading.Event()

    def shutdown(signum, frame):
        log.info("shutting down", extra={"signal": signum})
        stopped.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)

    leading = threading.Lock()

    def lead(provisioners):
        """Serve ``provisioners`` from now on: the workers start with the
        first Lease held; a later one brings every set back to the queue."""
        with leading:
            first = not serving
            serving.update(provisioners)
            log.info("leading: reconciling once the caches are synced", extra={"provisioners": sorted(provisioners)})
            metrics.leader.set(1)
            controller.wait_synced()
            if first:
                controller.start_workers()
            else:
                controller.requeue_all()

    locks = []
    if args.leader_elect:
        from kubernetes.leaderelection import leaderelection

        identity = f"{socket.gethostname()}_{os.getpid()}"

        def lost():
            log.error("lost leadership; exiting so a fresh process can compete again")
            os._exit(1)

        for name, namespace, provisioners in election_leases(args):
            # The Lease read held by another is lost at once (election.py). The
            # exit ends our runs too: the fork server kills them once our end of
            # its pipe closes.
            lock = election.ResilientLeaseLock(
                name, namespace, identity, on_taken=lost,
                on_standby=election.StandbyNotices(
                    ", ".join(provisioners), name, functools.partial(controller.sets_of, set(provisioners)),
                    functools.partial(standby_event, api_client)))
            elector = leaderelection.LeaderElection(
                election.Config(lock, lease_duration=args.leader_election_lease_duration,
                                renew_deadline=args.leader_election_renew_deadline,
                                retry_period=args.leader_election_retry_period,
                                onstarted_leading=functools.partial(lead, provisioners), onstopped_leading=lost)
            )
            thread = threading.Thread(target=elector.run, name=f"leader-election-{name}", daemon=True)
            thread.start()
            controller.keep_alive(thread)
            locks.append(lock)
    else:
        lead(args.provisioners)
    stopped.wait()
    controller.stop()
    if locks:
        # A rollout's new replica takes over at once instead of after the
        # Lease expires; but only once no reconcile of ours is still writing.
        if controller.wait_idle(SHUTDOWN_GRACE_SECONDS):
            for lock in locks:
                lock.release()
        else:
            log.warning("a reconcile is still running; the leader election Lease is left to expire")
    # A run still going ends with the fork server.
    runner.close()
    return 0


def entry() -> None:
    """The process: ``main()``, then the end of the process itself.

    The informers, the election and the metrics server are daemon threads
    and may still be writing to the log: finalizing the interpreter with
    them running can abort the process (SIGABRT on stderr's lock, seen as
    exit -6 after a clean SIGTERM). So it ends here, the logs flushed.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
