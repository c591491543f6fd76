"""A real OCI registry for the node tests: ``crane registry serve`` (the ``registry`` row of components/gotools.py) on
an address of the test's own network namespace, with the images pushed into it by ``crane push`` from the
docker-archives components/image.py builds. It speaks plain HTTP (containerd is told so per host, in a
``hosts.toml``, as an operator would) and logs every request, so a test can see that a node really fetched a
manifest and its blobs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.component import Component
from testkit.ports import free_ports
from testkit.waiting import wait_until

__all__ = ["Registry", "hosts_toml"]

_REQUEST = re.compile(r"^\S+ \S+ (?P<method>GET|HEAD|PUT|POST|PATCH|DELETE) (?P<path>/v2/\S*)")


@dataclass
class Registry:
    """``crane registry serve --address HOST:PORT --disk DIR``; ``start`` then ``push``; ``stop`` at the end."""

    host: str
    workdir: Path
    port: int = 0
    component: Component | None = None
    pushed: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _crane(self) -> Path:
        from components.gotools import tool_bin

        return tool_bin("registry") / "crane"

    def start(self) -> Registry:
        # crane writes uploads into the --disk folder but does not make it
        (self.workdir / "blobs").mkdir(parents=True, exist_ok=True)
        self.port, = free_ports(1)
        self.component = Component("registry", [str(self._crane()), "registry", "serve", "--address", self.address,
                                                "--disk", str(self.workdir / "blobs")],
                                   self.workdir / "registry.log")
        self.component.start()
        wait_until(lambda: self._serving(), 30, interval=0.1, message=f"crane registry serving on {self.address}")
        return self

    def _serving(self) -> bool:
        if self.component is None or not self.component.alive():
            raise RuntimeError(f"crane registry serve exited:\n{self.component.tail(20) if self.component else ''}")
        return "serving on port" in self.component.log.read_text(errors="replace")

    def push(self, archive: Path, name: str) -> str:
        """Upload a docker-archive as ``<registry>/<name>`` (``name`` is ``repository:tag``); returns the reference
        a pod names the image by."""
        from release.oci import push_image

        reference = f"{self.address}/{name}"
        started = time.monotonic()
        push_image(self._crane(), archive, reference, plain_http=True)  # the release's push (release/oci.py)
        self.pushed[reference] = f"{time.monotonic() - started:.1f} s"
        return reference

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every registry API request the server logged, in order."""
        assert self.component is not None
        lines = self.component.log.read_text(errors="replace").splitlines()
        return [(m["method"], m["path"]) for m in map(_REQUEST.match, lines) if m]

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()


def hosts_toml(registry: Registry) -> str:
    """containerd's per-registry configuration (``config_path``/HOST:PORT/hosts.toml): this registry speaks plain
    HTTP and may resolve and pull."""
    return (f'server = "http://{registry.address}"\n\n'
            f'[host."http://{registry.address}"]\n'
            '  capabilities = ["pull", "resolve"]\n')
