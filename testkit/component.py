"""One control-plane process (etcd, kube-apiserver, KWOK, a kubelet...) and the log it writes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from testkit.processes import log_tail, stop_process

T = TypeVar("T")


@dataclass
class Component:
    """One control-plane process and the log it writes, so failures can show what it said."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        stop_process(self.proc, timeout)

    def tail(self, lines: int) -> str:
        return log_tail(self.log, lines)


@contextmanager
def served(request: pytest.FixtureRequest, start: Callable[[], T], *, what: str, logs: Callable[[T], str],
           stop: Callable[[T], None]) -> Iterator[T]:
    """A fixture's running part: started (a start that fails is the test's one-line failure, not a traceback), then
    stopped, with its log printed first when the session had failures, so a failed run shows what it said."""
    try:
        running = start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield running
    if request.session.testsfailed:
        print(f"\n{what} (session had failures):\n{logs(running)}")
    stop(running)
