"""The run scripts of an instance's services on a lab host keep their logs
bounded: a guest that floods its serial console, written the way QEMU writes
its chardev log (not appending), takes at most the bound plus a few seconds'
worth of disk, and the last half before each cut stays readable in ``.1``."""

import os
import subprocess
import sys
import threading
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import logs

BOUND = 256 << 10


def _flood(path, seconds, count):
    """A process that writes numbered lines into ``path`` at about 4 MB/s (faster
    than a guest's UART) for ``seconds``, then the number of bytes it wrote into ``count``."""
    code = (f"import time\nout = open({str(path)!r}, 'w')\nend = time.time() + {seconds}\nn = 0\n"
            "while time.time() < end:\n"
            "    for _ in range(200):\n        out.write(f'line {n:09d} ' + 'x' * 200 + '\\n'); n += 1\n"
            "    out.flush(); time.sleep(0.01)\n"
            f"open({str(count)!r}, 'w').write(str(n * 215))\n")
    return [sys.executable, "-c", code]


def test_a_flooded_log_stays_bounded_and_keeps_its_tail(tmp_path):
    log = tmp_path / "serial.log"
    service_log = tmp_path / "vm" / "log"  # absent here (systemd): skipped
    script = tmp_path / "run"
    count = tmp_path / "written"
    script.write_text(logs.run_script(_flood(log, 3, count), [str(log), str(service_log)], max_bytes=BOUND,
                                      seconds=0.2))
    script.chmod(0o755)
    kept_path = tmp_path / "serial.log.1"
    seen, done = [], threading.Event()

    def read_kept():
        # Read as a lessee's tail would, while the keeper cuts.
        while not done.is_set():
            try:
                seen.append(len(kept_path.read_bytes()))
            except FileNotFoundError:
                pass
            time.sleep(0.002)

    reader = threading.Thread(target=read_kept)
    reader.start()
    try:
        subprocess.run([str(script)], check=True, timeout=30)
    finally:
        done.set()
        reader.join()
    assert seen and 0 not in seen, "a reader found the kept half empty while it was cut"
    assert int(count.read_text()) > 20 * BOUND, "the flood was too small to show anything"
    assert log.stat().st_blocks * 512 <= 8 * BOUND
    kept = kept_path.read_bytes()
    assert 0 < len(kept) <= BOUND // 2 and b"\0" not in kept
    assert kept.rstrip().split(b"\n")[-1].startswith(b"line ")


def test_the_keeper_ends_with_its_service(tmp_path):
    script = tmp_path / "run"
    marker = tmp_path / "keeper-ran"
    # The keeper checks its log list while the service runs; an absent log is skipped.
    script.write_text(logs.run_script([sys.executable, "-c", "import time; time.sleep(0.6)"],
                                      [str(tmp_path / "absent.log")], seconds=0.1)
                      .replace("sleep 0.1", f"sleep 0.1; touch {marker}"))
    script.chmod(0o755)
    started = time.monotonic()
    subprocess.run([str(script)], check=True, timeout=30)
    assert time.monotonic() - started < 5
    assert marker.exists()
    time.sleep(0.5)  # a last round may be under way as the service ends
    marker.unlink()
    time.sleep(0.5)
    assert not marker.exists(), "the keeper outlived its service"


def test_the_run_script_becomes_the_service():
    text = logs.run_script(["/opt/qemu system", "-name", "a b"], ["/var/x/serial.log"])
    assert text.startswith("#!/bin/sh\n")
    assert text.rstrip().splitlines()[-1] == "exec '/opt/qemu system' -name 'a b'"
    assert f"-gt {logs.MAX_LOG_BYTES} " in text and os.path.basename("/var/x/serial.log") in text
