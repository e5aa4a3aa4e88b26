"""Which test files run in scripts/test's second process, from measured durations.

scripts/test runs two pytest processes side by side. The lab hosts are
machine-wide, so every file of lab-host tests runs in the first one (``-m
"labhosts or second_process"``); the other files are shared out so that both
processes' measured totals end near each other: longest first, each to the
process with less measured time so far. A file never measured counts by an
estimate from its tests (``estimate``) until a run has measured it. The
measurements are per file, in seconds (setup, call and teardown of its
tests), from the last run of scripts/test on this machine
(``$CACHE_DIR/test-profile/durations.json``), else from a run committed in
``tests/durations.json`` when there is one.
"""

import json
import os
from pathlib import Path

COMMITTED = Path(__file__).with_name("durations.json")


def measured_durations() -> dict[str, float]:
    """Seconds per test file: this machine's last run, else the committed one."""
    cache = os.environ.get("JVE_TEST_DURATIONS")
    for path in ([Path(cache)] if cache else []) + [COMMITTED]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data:
            return {str(name): float(seconds) for name, seconds in data.items()}
    return {}


# Seconds a test of each kind takes, for a file not measured yet: the means
# per test of the files tests/durations.json measured (a lab-host file's
# whole time per lab-host test). A test on the real node boots its guests
# there, five times a bed test.
ESTIMATE_SECONDS = {"labhosts": 42.0, "realnode": 28.0, "testbed": 5.5, "plain": 0.2}


def estimate(kinds: dict[str, list[str]]) -> dict[str, float]:
    """Seconds per file from the kinds of its tests (``{file: [kind, ...]}``)."""
    return {name: sum(ESTIMATE_SECONDS[kind] for kind in tests) for name, tests in kinds.items()}


def beside_lab_hosts(files, lab_files, durations, together=()) -> set[str]:
    """The files, other than ``lab_files``, that join the lab hosts' process.

    Greedy by measured time, longest first (ties by name, so both processes
    compute the same answer): each file goes to whichever process has less
    measured time so far; the lab hosts' process starts with its lab files.
    The files of each set in ``together`` (those sharing a session fixture)
    go as one, to the lab hosts' process if one of them is a lab file.
    Times are summed as whole milliseconds: a float sum depends on the order
    of a set's iteration, which differs between processes (hash seeds), and
    at a tie the processes would split differently and run neither's share.
    """

    def millis(unit) -> int:
        return sum(round(durations.get(name, 0.0) * 1000) for name in unit)

    files, lab_files = set(files), set(lab_files)
    units: list[set[str]] = []
    for group in together:
        group = set(group) & files
        for unit in [unit for unit in units if unit & group]:
            units.remove(unit)
            group |= unit
        if group:
            units.append(group)
    grouped = set().union(*units)
    units += [{name} for name in files - grouped]
    first, second = 0, 0
    chosen, others = set(), []
    for unit in units:
        if unit & lab_files:
            chosen |= unit
            first += millis(unit)
        elif any(name in durations for name in unit):
            others.append(unit)
    others.sort(key=lambda unit: (-millis(unit), min(unit)))
    for unit in others:
        if first < second:
            chosen |= unit
            first += millis(unit)
        else:
            second += millis(unit)
    return chosen - lab_files


def merge(old: dict[str, float], *runs: dict[str, float]) -> dict[str, float]:
    """``old`` with each file measured by ``runs`` (the processes of one
    scripts/test run) replaced by its new figure: the sum over the runs, since
    a file's lab-host tests and its others run in different processes."""
    measured: dict[str, float] = {}
    for run in runs:
        for name, seconds in run.items():
            measured[name] = measured.get(name, 0.0) + seconds
    merged = dict(old)
    merged.update({name: round(seconds, 1) for name, seconds in measured.items()})
    return dict(sorted(merged.items()))
