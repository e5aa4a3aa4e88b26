"""Command line of the test bed; `scripts/testbed` calls it.

up [--audit] [--nodes N] [--no-controllers]   start (or reuse) the bed
down [--remove]                               stop it (and delete its state)
env                                           print the shell exports
status                                        show its processes
"""

from __future__ import annotations

import argparse
import shlex
import sys

from .bed import DEFAULT_STATE_DIR, TestBed, TestBedError


def exports(bed: TestBed) -> str:
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in bed.env.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/testbed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        help="where the bed keeps its state (default: $JVE_TESTBED_DIR or %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up")
    up.add_argument("--audit", action="store_true", help="write an API audit log (logs/audit.log)")
    up.add_argument("--nodes", type=int, default=2, help="fake kwok Nodes to create")
    up.add_argument(
        "--no-controllers",
        dest="controllers",
        action="store_false",
        help="only etcd + kube-apiserver (no controller-manager, scheduler, kwok)",
    )
    down = commands.add_parser("down")
    down.add_argument("--remove", action="store_true", help="also delete the state directory")
    commands.add_parser("env")
    commands.add_parser("status")
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            bed = TestBed(args.state_dir, nodes=args.nodes, controllers=args.controllers, audit=args.audit)
            reused = bed.is_running()
            bed.up()
            how = "reused" if reused else f"started in {bed.startup_seconds:.1f} s"
            print(f"# test bed {how}: {bed.server}, logs in {bed.state_dir / 'logs'}", file=sys.stderr)
            print(exports(bed))
        elif args.command == "down":
            TestBed(args.state_dir).down(remove=args.remove)
        elif args.command == "env":
            print(exports(TestBed(args.state_dir)))
        elif args.command == "status":
            bed = TestBed(args.state_dir)
            for component, state in bed.status().items():
                print(f"{component:24} {state}")
            print(f"{'kubeconfig':24} {bed.kubeconfig}")
            return 0 if bed.is_running() else 1
    except TestBedError as error:
        print(f"testbed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
