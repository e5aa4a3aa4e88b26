"""Bounded logs of the services of an instance on a lab host.

A guest writes its serial console into ``serial.log`` (QEMU's chardev
``logfile``) and the services' output lands in ``<service>/log``
(``jumpstarter-supervise``). The guest belongs to the lessee, so without a
bound it could fill the lab host's disk that every tenant's instances share.
``run_script`` writes a service's ``run`` script that starts a keeper beside
the service: every ``CHECK_SECONDS``, a log that takes more than
``MAX_LOG_BYTES`` of disk keeps its last ``MAX_LOG_BYTES / 2`` bytes in
``<log>.1`` and starts again empty. So one log holds at most about
``MAX_LOG_BYTES`` plus what the service writes in ``CHECK_SECONDS``, and
its ``.1`` half of that. The ``.1`` is replaced whole (a rename), so a
reader sees the last cut's or the one before, never one being written.

The disk taken (allocated blocks) is measured, not the length: QEMU does not
open its log for appending, so after the cut it writes on at its old offset,
which leaves a hole (no blocks) before the new bytes; NUL bytes of that hole
are left out of ``<log>.1``. The keeper runs as long as the service: it
watches the process the script becomes (``exec``) and ends with it.

Pure: builds text only.
"""

import shlex

MAX_LOG_BYTES = 16 << 20
CHECK_SECONDS = 5

_KEEPER = """\
# Each log below takes at most about {max_bytes} bytes of disk (plugins/module_utils/baremetal/logs.py).
keep_logs() {{
    while kill -0 "$1" 2>/dev/null; do
        for log in {logs}; do
            used=$(( $(stat -c '%b * %B' "$log" 2>/dev/null || echo 0) ))
            if [ "$used" -gt {max_bytes} ]; then
                tail -c {half} "$log" | tr -d '\\000' > "$log.1.new" && mv -f "$log.1.new" "$log.1"
                : > "$log"
            fi
        done
        sleep {seconds}
    done
}}
keep_logs $$ </dev/null >/dev/null 2>&1 &
"""


def run_script(argv, logs, max_bytes=MAX_LOG_BYTES, seconds=CHECK_SECONDS):
    """A ``/bin/sh`` script that keeps ``logs`` bounded and becomes ``argv``."""
    keeper = _KEEPER.format(logs=shlex.join(logs), max_bytes=int(max_bytes), half=int(max_bytes) // 2,
                            seconds=seconds)
    return f"#!/bin/sh\n{keeper}exec {shlex.join(argv)}\n"
