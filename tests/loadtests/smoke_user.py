"""Run one Locust user class with ``locust.run_single_user`` until it made N requests.

    python tests/loadtests/smoke_user.py USER_CLASS N OUT.json -- [Locust options: --host ...]

A script, not a test module: importing Locust monkey-patches the importing process with gevent,
so the smoke tests run this in a subprocess and read OUT.json (``finished``, every request
recorded through ``events.request``, and the user's exception if it died).
"""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    # A hung run prints every thread's stack and exits, instead of only timing out in pytest.
    faulthandler.dump_traceback_later(50, exit=True)
    user_class_name, wanted, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    locust_args = sys.argv[sys.argv.index("--") + 1 :]
    # run_single_user parses sys.argv with Locust's parser (custom options included).
    sys.argv = [sys.argv[0], *locust_args]

    import gevent
    from gevent.event import Event
    from locust import events, run_single_user

    from loadtests import locustfile

    user_class = getattr(locustfile, user_class_name)
    records: list[dict[str, Any]] = []
    done = Event()

    @events.request.add_listener
    def record(request_type: str, name: str, response_time: float, response_length: int, **kw: Any) -> None:
        exception = kw.get("exception")
        records.append(
            {
                "type": request_type,
                "name": name,
                "response_time": response_time,
                "response_length": response_length,
                "exception": repr(exception) if exception else None,
            }
        )
        if len(records) >= wanted:
            done.set()

    def run() -> None:
        # run_single_user looks up its caller's frame: a greenlet must not call it directly.
        run_single_user(user_class, loglevel="ERROR")

    greenlet = gevent.spawn(run)
    greenlet.link(lambda _: done.set())  # a user that dies must not leave us waiting
    finished = done.wait(timeout=30)
    died = greenlet.dead and greenlet.exception is not None
    greenlet.kill(block=True, timeout=5)
    out.write_text(
        json.dumps(
            {
                "finished": bool(finished) and len(records) >= wanted,
                "requests": records,
                "user_exception": repr(greenlet.exception) if died else None,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
