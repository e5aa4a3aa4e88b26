"""A long-lived process that has imported Ansible once and forks one child
per playbook run: what a run costs without an interpreter start and the
imports of ansible-core, Jinja2, PyYAML and the kubernetes client (about
0.7 CPU-s of a run's 0.9 on a 2-core machine, bench/README.md).

The operator starts it (runner.py, ``ForkServer``) and ansible-runner
starts ``forkclient.py`` in place of ``ansible-playbook``; the client hands
over its command line, environment, working directory and standard
streams, and the child runs ``ansible-playbook``'s own entry point with
them, in a process group of its own, and its exit code goes back to the
client.

ansible-core reads its configuration (``ansible.constants``) once, when it
is imported. The server imports it on its first request, with that
request's environment and directory, and serves a later request only when
everything the configuration reads is the same: each base setting's
environment variable, ``ANSIBLE_CONFIG``, ``HOME`` and the directory
(where ``ansible.cfg`` is looked up). Any other request is answered
``cold`` with the variable that differs, and the client runs
``ansible-playbook`` itself. Plugin options (the fact cache's directory
among them) are read when the run loads the plugin, so they may differ.

Each child gets a local temporary directory of its own (the one Ansible
made at import is the server's) and removes it when it ends.

The server ends when the operator's end of its pipe closes (the operator
ended, SIGKILL included; standard input when it runs as ``python -m``), and
kills the runs still going; no client holds it from reading the pipe for
longer than ``REQUEST_TIMEOUT``. A run is killed whole (its process group and
the processes that left it, by the mark in their environment) when its
client goes away first, and whatever is left of it when it ends: a task
worker killed (the out-of-memory killer) leaves its module running, which
would go on writing after the run was reported.

No process of a run outlives the server either, SIGKILL included: every
process forked from the server without an exec (a run, its task workers)
is killed by the kernel when the process that forked it ends
(``PR_SET_PDEATHSIG``), and a reaper, forked from the server and holding
the one end of a pipe no other process holds, kills every process carrying
the server's mark (the modules and commands the workers exec) once that
pipe closes, that is once the server has ended however it ended. The mark
is the operator's choice (``--mark``), unique to the server: the operator
sweeps it too once the server has ended (runner.py ``ForkServer``), so a
reaper killed with its server leaves nothing behind either.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time

# Imported on the first request, with its environment; a run then forks
# from here with them loaded.
PRELOAD = (
    "ansible.cli.playbook",
    "ansible.executor.playbook_executor",
    "ansible.executor.task_queue_manager",
    "ansible.executor.process.worker",
    "ansible.playbook.handler_task_include",
    "ansible.utils.shlex",
    "ansible.module_utils.common.arg_spec",
    # What loading a run's plugins imports: the plugin loader reuses a
    # module already imported under the plugin's name.
    *(f"ansible.plugins.{name}" for name in (
        "strategy.linear", "action.normal", "action.set_fact",
        "become.su", "become.sudo",
        "cache.memory", "cache.jsonfile",
        "callback.default", "callback.minimal", "callback.junit", "callback.oneline", "callback.tree",
        "connection.local", "connection.ssh", "connection.paramiko_ssh", "connection.psrp",
        "connection.winrm",
        "doc_fragments.connection_pipelining", "doc_fragments.default_callback",
        "doc_fragments.result_format_callback", "doc_fragments.shell_common",
        "doc_fragments.shell_windows", "doc_fragments.vars_plugin_staging",
        "filter.core", "filter.mathstuff", "filter.urlsplit", "filter.encryption",
        "inventory.auto", "inventory.host_list", "inventory.ini", "inventory.script",
        "inventory.toml", "inventory.yaml",
        "lookup.env",
        "shell.sh", "shell.cmd", "shell.powershell",
        "test.core", "test.files", "test.mathstuff", "test.uri",
        "vars.host_group_vars",
    )),
    "multiprocessing.popen_fork",
    "multiprocessing.synchronize",
    "kubernetes.client",
    "kubernetes.config",
)
# Read when a run loads its plugin, not at import: free to differ per run.
PER_RUN = frozenset({"ANSIBLE_CACHE_PLUGIN_CONNECTION"})
MAX_REQUEST = 16 * 1024 * 1024
# Seconds a client has to send its whole request. The server reads one
# request at a time in its loop, which also reads the operator's end of the
# pipe: a client that connected and went quiet would otherwise hold the
# server past the operator's end, and with it every run still going.
REQUEST_TIMEOUT = 5.0
# Every process of a run carries it in its environment (Ansible's task
# workers leave the run's process group for sessions of their own).
RUN_MARK = "JVE_FORK_RUN"
# And the server's own mark (unique, never a pid another server may get):
# what its reaper and the operator kill once the server has ended.
SERVER_MARK = "JVE_FORK_SERVED_BY"
PR_SET_PDEATHSIG = 1


class Refused(Exception):
    """A request this server does not run; the client runs it cold."""


def read_request(conn: socket.socket, timeout: float | None = None) -> tuple[dict, list[int]]:
    """The request's JSON body and the three descriptors sent with it, all
    within ``timeout`` seconds (``socket.timeout`` past them)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    conn.settimeout(timeout)
    fds = []
    header, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * 4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    try:
        if len(header) != 4 or len(fds) != 3:
            raise Refused(f"a request with {len(header)} header bytes and {len(fds)} descriptors")
        (size,) = struct.unpack("!I", header)
        if size > MAX_REQUEST:
            raise Refused(f"a request of {size} bytes")
        body = b""
        while len(body) < size:
            if deadline is not None:
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = conn.recv(min(65536, size - len(body)))
            if not chunk:
                raise Refused("the client closed its request half sent")
            body += chunk
        request = json.loads(body)
        if not (isinstance(request.get("argv"), list) and isinstance(request.get("env"), dict)
                and isinstance(request.get("cwd"), str)):
            raise Refused("a request without argv, env and cwd")
        return request, fds
    except (Refused, ValueError):
        for fd in fds:
            os.close(fd)
        raise


# Plugins every run loads, by loader: loading one here reads its
# documentation's options into the configuration once (YAML, the largest
# part of what a run does before its first task). Their classes only: not
# the vars plugins, whose loader keeps instances.
WARM_PLUGINS = {
    "become": ("su", "sudo"),
    "cache": ("memory", "jsonfile"),
    "callback": ("default", "minimal", "junit", "oneline", "tree"),
    "connection": ("local", "ssh", "paramiko_ssh", "psrp", "winrm"),
    "inventory": ("auto", "host_list", "ini", "script", "toml", "yaml"),
    "shell": ("sh", "cmd", "powershell"),
    "strategy": ("linear",),
}


# This collection's plugins that run in the controller's processes (action
# plugins in a run's task workers, filters and tests wherever a template
# is rendered) with the module_utils they import: a task worker imports
# them afresh otherwise (0.15 CPU-s for exporter_pods' alone).
COLLECTION = "jumpstarter.virtual_exporters"
COLLECTION_PLUGINS = ("action", "filter", "test")
# What the server and its runs use of ansible-core that it does not publish.
COMPAT = f"ansible_collections.{COLLECTION}.plugins.module_utils.ansible_compat"


def compat():
    """The collection's ``ansible_compat``, imported through Ansible's
    collection loader (``warm_plugins`` configures it) as a run imports it."""
    import importlib

    return importlib.import_module(COMPAT)


def warm_collection() -> None:
    """Import ``COLLECTION_PLUGINS`` of ``COLLECTION`` through Ansible's
    collection loader, as a run would."""
    import importlib

    for kind in COLLECTION_PLUGINS:
        package_name = f"ansible_collections.{COLLECTION}.plugins.{kind}"
        try:
            package = importlib.import_module(package_name)
        except ImportError:
            continue
        names = sorted({entry[:-3] for directory in package.__path__ if os.path.isdir(directory)
                        for entry in os.listdir(directory) if entry.endswith(".py") and entry != "__init__.py"})
        for name in names:
            try:
                importlib.import_module(f"{package_name}.{name}")
            except Exception as exc:  # a run imports it itself, and says what is wrong
                sys.stderr.write(f"fork server: not preloaded: {package_name}.{name}: {exc}\n")


def warm_plugins() -> None:
    """The collection loader as ``ansible-playbook`` configures it (its
    command line has no collections path), the ``ansible.builtin``
    collection's routing, the plugins of ``WARM_PLUGINS`` and this
    collection's of ``COLLECTION_PLUGINS``."""
    import importlib

    from ansible.plugins import loader

    loader.init_plugin_loader([])
    importlib.import_module("ansible_collections.ansible.builtin")
    for kind, names in WARM_PLUGINS.items():
        plugin_loader = getattr(loader, f"{kind}_loader")
        for name in names:
            try:
                plugin = plugin_loader.get(f"ansible.builtin.{name}", class_only=True)
            except Exception as exc:  # a run loads it itself
                sys.stderr.write(f"fork server: not preloaded: {kind} plugin {name}: {exc}\n")
                continue
            if kind == "callback" and plugin is not None:
                # A run loads every callback by its file's name (the
                # callback loader's all()), not by its collection name.
                compat().register_plugin_options(kind, name, plugin.__module__)
    warm_collection()


def config_names() -> list[str]:
    """Every environment variable ansible-core's base configuration reads
    when it is imported, with the ones that decide which file it reads."""
    return sorted({"ANSIBLE_CONFIG", "HOME", *compat().config_environment()} - PER_RUN)


def config_key(names: list[str], request: dict) -> dict:
    env = request["env"]
    key = {name: env.get(name) for name in names}
    key["(working directory)"] = request["cwd"]
    return key


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def set_name(name: bytes) -> None:
    """The process's name as ``ps`` and /proc/PID/comm show it."""
    try:
        _libc().prctl(15, name, 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def die_with_forking_parent() -> None:
    """Register, in this process, that every process it or a process
    forked from it forks without an exec is SIGKILLed by the kernel when
    its parent ends. The setting survives an exec but not a fork, hence at
    every fork; a parent gone before the setting took is checked for."""
    prctl = _libc().prctl
    parent = [0]

    def before() -> None:
        parent[0] = os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent[0]:
            os.kill(os.getpid(), signal.SIGKILL)

    os.register_at_fork(before=before, after_in_child=in_child)


def _ssh_master(pid: str) -> bool:
    """An OpenSSH ControlMaster (``ssh: <path> [mux]``) a run left for the
    next runs to the same host (``ControlPersist``): it does no work of
    the run and ends by itself when idle."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            if comm.read().strip() != b"ssh":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            line = cmdline.read().rstrip(b"\0")
    except OSError:
        return False
    return line.startswith(b"ssh: ") and line.endswith(b" [mux]")


def kill_marked(name: str, value: int) -> int:
    """SIGKILL every process whose environment has ``name=value`` (but
    ``_ssh_master``), until a pass over /proc finds none: a process may
    fork while we look, and its child carries the mark. How many were
    killed."""
    mark = f"{name}={value}".encode()
    me = str(os.getpid())
    killed = 0
    for _ in range(100):
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or entry.name == me:
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as environ:
                    if mark not in environ.read().split(b"\0") or _ssh_master(entry.name):
                        continue
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
            except (OSError, ValueError):
                continue
        killed += found
        if not found:
            break
    return killed


def kill_run(pid: int) -> None:
    """SIGKILL every process of the run ``pid``: its process group and the
    processes that left it (found by ``RUN_MARK``)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_marked(RUN_MARK, pid)


def new_mark() -> str:
    """A ``SERVER_MARK`` value no other server has."""
    return f"{os.getpid()}.{secrets.token_hex(8)}"


def start_reaper(server: str) -> tuple[int, int]:
    """Fork the reaper of the server marked ``server`` (this process): it waits
    for the pipe whose write end it returns to close, which happens only
    when the server ends (no other process holds that end: a run closes
    it, and it is closed on exec), then kills every process marked as the
    server's. Returns (the reaper's pid, the write end)."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            _libc().prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)  # it must outlive the server
            os.setpgid(0, 0)
            set_name(b"jve-reaper")
            # Nothing but SIGKILL ends it (SIGHUP comes with its group
            # orphaned by the server's end while it is stopped).
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            # Every descriptor of the server but its standard streams.
            os.closerange(3, read)
            os.closerange(read + 1, 1 << 20)
            while os.read(read, 4096):
                pass
            kill_marked(SERVER_MARK, server)
        finally:
            os._exit(0)
    os.close(read)
    return pid, write


def reply(conn: socket.socket, **message) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


class Server:
    def __init__(self, path: str, parent_fd: int = 0, mark: str | None = None):
        self.path = path
        # Our end of the operator's pipe: it closes when the operator ends.
        self.parent_fd = parent_fd
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(parent_fd, selectors.EVENT_READ, "parent")
        self.names: list[str] | None = None
        self.key: dict | None = None
        # pid → (connection, pidfd) of each run still going.
        self.runs: dict[int, tuple[socket.socket, int]] = {}
        self.pid = os.getpid()
        self.mark = mark or new_mark()
        self.reaper, self.lifeline, self.reaper_fd = 0, -1, -1
        self.start_reaper()
        die_with_forking_parent()

    def start_reaper(self) -> None:
        if self.reaper_fd >= 0:
            self.selector.unregister(self.reaper_fd)
            os.close(self.reaper_fd)
            os.close(self.lifeline)
            os.waitpid(self.reaper, 0)
        self.reaper, self.lifeline = start_reaper(self.mark)
        self.reaper_fd = os.pidfd_open(self.reaper)
        self.selector.register(self.reaper_fd, selectors.EVENT_READ, "reaper")

    def load(self, request: dict) -> None:
        """Import Ansible under the first request's environment."""
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError as exc:  # a run imports it itself, as ansible-playbook does
                sys.stderr.write(f"fork server: not preloaded: {name}: {exc}\n")
        warm_plugins()
        self.names = config_names()
        self.key = config_key(self.names, request)
        # The imported objects stay out of the collector's passes, so a
        # child's collections do not copy the pages it shares with us.
        gc.collect()
        gc.freeze()

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "accept":
                    self.accept()
                elif key.data == "reaper":  # killed: another one
                    self.start_reaper()
                elif key.data == "parent":
                    if not os.read(self.parent_fd, 4096):
                        self.stop()
                        return
                elif key.data[0] == "run":
                    self.reap(key.data[1])
                elif key.data[0] == "client":
                    self.client_gone(key.data[1])

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = read_request(conn, REQUEST_TIMEOUT)
        except (Refused, OSError) as exc:
            reply(conn, cold=str(exc))
            conn.close()
            return
        conn.settimeout(None)
        try:
            if self.key is None:
                try:
                    self.load(request)
                except Exception as exc:
                    self.key = None
                    raise Refused(f"cannot load Ansible: {exc!r}") from None
            differs = [name for name, value in config_key(self.names, request).items()
                       if self.key.get(name) != value]
            if differs:
                raise Refused(f"{differs[0]} differs from the environment the server loaded Ansible with")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except Refused as exc:
            for fd in fds:
                os.close(fd)
            reply(conn, cold=str(exc))
            conn.close()
            return
        if pid == 0:
            self.child(request, fds, conn)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.runs[pid] = (conn, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, ("run", pid))
        self.selector.register(conn, selectors.EVENT_READ, ("client", pid))
        reply(conn, pid=pid)

    def child(self, request: dict, fds: list[int], conn: socket.socket) -> None:
        """The run: never returns."""
        rc = 1
        try:
            os.setpgid(0, 0)
            set_name(b"jve-run")
            # As ansible-playbook would have them, started by the client:
            # the signals the client was started with ignored stay ignored
            # (a Python ignores SIGPIPE and SIGXFSZ: a write to a closed
            # pipe, say to an ssh that died, raises in the task worker
            # instead of killing it), SIGINT raises KeyboardInterrupt,
            # every other signal as the system has it.
            ignored = {int(signum) for signum in request.get("ignored_signals") or ()}
            for signum in signal.valid_signals():
                if signum in (signal.SIGKILL, signal.SIGSTOP):
                    continue
                if signum in ignored:
                    handler = signal.SIG_IGN
                elif signum == signal.SIGINT:
                    handler = signal.default_int_handler
                else:
                    handler = signal.SIG_DFL
                try:
                    signal.signal(signum, handler)
                except (OSError, ValueError):  # the C library's own real-time signals
                    pass
            self.selector.close()
            self.listener.close()
            if self.parent_fd > 2:
                os.close(self.parent_fd)
            conn.close()
            for other_conn, pidfd in self.runs.values():
                other_conn.close()
                os.close(pidfd)
            # The reaper must see the pipe close when the server ends.
            os.close(self.lifeline)
            os.close(self.reaper_fd)
            # The run's output goes to the client's terminal; its input is
            # empty. The terminal is the client's, not ours to control, and
            # a run reads nothing (a pause task then only waits, as it does
            # without a terminal).
            os.close(fds[0])
            fds[0] = os.open(os.devnull, os.O_RDONLY)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace", line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace", line_buffering=True)
            sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
            os.environ.clear()
            os.environ.update(request["env"])
            os.environ[RUN_MARK] = str(os.getpid())
            os.environ[SERVER_MARK] = self.mark
            os.chdir(request["cwd"])
            sys.argv = list(request["argv"])
            import warnings

            from ansible.cli.playbook import main

            # Configured here already, the same way (warm_plugins).
            warnings.filterwarnings("ignore", message="AnsibleCollectionFinder has already been configured")

            # The server's own local temporary directory is not the run's.
            local_tmp = tempfile.mkdtemp(prefix=f"ansible-local-{os.getpid()}",
                                         dir=os.path.dirname(compat().local_tmp()))
            compat().set_local_tmp(local_tmp)
            try:
                main(sys.argv)
                rc = 0
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            finally:
                shutil.rmtree(local_tmp, ignore_errors=True)
        except BaseException as exc:  # the run must end here, whatever happens
            try:
                sys.stderr.write(f"fork server: the run failed to start: {exc!r}\n")
            except Exception:
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(rc if 0 <= rc < 256 else 1)

    def reap(self, pid: int) -> None:
        conn, pidfd = self.runs.pop(pid)
        self.selector.unregister(pidfd)
        if conn.fileno() in self.selector.get_map():
            self.selector.unregister(conn)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        # Killed before it could stop its task workers, or a worker was
        # killed and its module goes on: nothing of it outlives its end.
        kill_run(pid)
        reply(conn, rc=128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        conn.close()

    def client_gone(self, pid: int) -> None:
        """The client closed its end (killed, or done): a run whose client
        is gone has no one to report to, so its process group ends."""
        conn, _ = self.runs[pid]
        try:
            if conn.recv(1, socket.MSG_PEEK):
                conn.recv(4096)  # nothing is expected; keep the socket drained
                return
        except OSError:
            pass
        self.selector.unregister(conn)
        kill_run(pid)

    def stop(self) -> None:
        for pid in list(self.runs):
            kill_run(pid)
        for pid, (conn, pidfd) in list(self.runs.items()):
            os.waitpid(pid, 0)
            conn.close()
            os.close(pidfd)
        self.runs.clear()
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def serve_forked(path: str, parent_fd: int, mark: str | None = None) -> None:
    """The server in a process forked from the operator before it started
    any thread: it shares the pages of what the operator had imported (the
    kubernetes client, the interpreter's own). Never returns.

    The operator imported the collection's module_utils as a plain package;
    they go from ``sys.modules`` here, so that Ansible's collection loader
    imports the collection its own way, as in ``ansible-playbook``; and so
    do the operator's log handlers."""
    code = 1
    try:
        os.setsid()
        set_name(b"jve-forkserver")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for name in [name for name in sys.modules if name.split(".")[0] == "ansible_collections"]:
            del sys.modules[name]
        import logging

        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        Server(path, parent_fd, mark).serve()
        code = 0
    except BaseException as exc:
        try:
            sys.stderr.write(f"fork server: stopped: {exc!r}\n")
        except Exception:
            pass
    finally:
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on")
    parser.add_argument("--mark", help=f"the {SERVER_MARK} value of this server's runs (unique)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the operator stops us by closing our stdin
    set_name(b"jve-forkserver")
    Server(args.socket, mark=args.mark).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
