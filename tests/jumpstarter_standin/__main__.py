"""Serve one namespace as the Jumpstarter controller would, until Ctrl-C.

    PYTHONPATH=tests python -m jumpstarter_standin --namespace demo

Uses ``$KUBECONFIG``. Prints the gRPC endpoint; the controller CA is
published as the ConfigMap ``jumpstarter-service-ca-cert`` in the namespace.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

from .pytest_plugin import serve_namespace


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m jumpstarter_standin", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    args = parser.parse_args()
    if not args.kubeconfig:
        parser.error("--kubeconfig or $KUBECONFIG is required")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with serve_namespace(args.kubeconfig, args.namespace) as view:
        print(f"serving namespace {args.namespace}: gRPC {view.grpc.endpoint}, "
              f"CA in ConfigMap {args.namespace}/jumpstarter-service-ca-cert; Ctrl-C stops", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
