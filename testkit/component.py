"""One control-plane process (etcd, kube-apiserver, KWOK, a kubelet...) and the log it writes."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from testkit.processes import log_tail, stop_process


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
