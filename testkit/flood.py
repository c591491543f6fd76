"""A connection flood, as a pod with no rights can make one: idle TCP connections to a port, each reopened as
soon as the server closes or answers it, from one or several loopback source addresses (each a distinct peer).

Run as a subprocess (``python -m testkit.flood PORT COUNT SECONDS SOURCE...``) so that it neither shares the
server's interpreter lock nor its descriptors. It prints one JSON line a second ({"open": connections established
and not yet closed by the server, "reopened": total reopened}) and a last one when done; it sends nothing, so
every connection holds what an idle client holds.
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from testkit.processes import stop_process
from testkit.repo import REPO


def _flood(port: int, count: int, seconds: float, sources: Sequence[str]) -> None:
    selector = selectors.DefaultSelector()
    established = 0
    reopened = 0

    def open_one(index: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((sources[index % len(sources)], 0))
        s.setblocking(False)
        code = s.connect_ex(("127.0.0.1", port))
        if code not in (0, errno.EINPROGRESS):
            s.close()
            raise OSError(code, f"connect: {errno.errorcode.get(code, code)}")
        selector.register(s, selectors.EVENT_WRITE, [index, False])  # writable once connected

    for i in range(count):
        open_one(i)
    end = time.monotonic() + seconds
    next_report = time.monotonic() + 1.0
    while (now := time.monotonic()) < end:
        for key, _ in selector.select(min(0.1, max(0.0, end - now))):
            s, state = key.fileobj, key.data
            if not state[1]:  # the connect finished (or failed)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    state[1] = True
                    established += 1
                    selector.modify(s, selectors.EVENT_READ, state)
                    continue
            else:  # the server answered or closed: drop it and open another
                established -= 1
            selector.unregister(s)
            s.close()
            reopened += 1
            open_one(state[0])
        if time.monotonic() >= next_report:
            next_report += 1.0
            print(json.dumps({"open": established, "reopened": reopened}), flush=True)
    print(json.dumps({"open": established, "reopened": reopened, "done": True}), flush=True)


class Flood:
    """The flood as a running subprocess; ``latest`` is its last report."""

    def __init__(self, port: int, count: int, seconds: float, sources: Sequence[str]) -> None:
        self.reports: list[dict] = []
        self._proc = subprocess.Popen([sys.executable, "-m", "testkit.flood", str(port), str(count),
                                       str(seconds), *sources], cwd=REPO, stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.reports.append(json.loads(line))

    @property
    def latest(self) -> dict:
        return self.reports[-1] if self.reports else {"open": 0, "reopened": 0}

    def wait(self, timeout: float) -> dict:
        self._proc.wait(timeout)
        self._reader.join(5)
        assert self._proc.returncode == 0, f"the flood failed ({self._proc.returncode})"
        return self.latest

    def stop(self) -> None:
        stop_process(self._proc, timeout=5, graceful=False)


if __name__ == "__main__":
    _flood(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
