"""Run the fake by hand: ``PYTHONPATH=tests python -m corellium_fake``.

Prints the host, CA file and token to use, then serves until interrupted.
"""

import argparse
import signal
import threading

from .server import DEFAULT_TOKEN, Delays, FakeCorellium


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--delay", type=float, default=1.0,
                        help="seconds each state transition takes")
    args = parser.parse_args()
    delay = args.delay
    fake = FakeCorellium(token=args.token,
                         delays=Delays(create=delay, boot=delay, stop=delay, delete=delay,
                                       reboot=delay))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with fake:
        print(f"CORELLIUM_API_HOST={fake.host}", flush=True)
        print(f"CORELLIUM_CA_FILE={fake.ca_path}", flush=True)
        print(f"CORELLIUM_API_TOKEN={fake.token}", flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
