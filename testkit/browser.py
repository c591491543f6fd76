"""A real headless Chromium driven over the DevTools protocol: navigate, click, read the DOM, screenshot.

Chromium picks its own debugging port (``--remote-debugging-port=0``) and
writes it to ``DevToolsActivePort`` in the profile folder, so nothing binds a
fixed port. The websocket client is the one the kubernetes package already
depends on.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

from testkit.processes import stop_process

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium package is required for the page test (.ci/run installs it)"
    return path


class Browser:
    def __init__(self, profile: Path, width: int = 1100, height: int = 800) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                       "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self._proc.poll() is None and time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        call = next(self._ids)
        self._ws.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == call:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError:  # the page is between documents (a reload)
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"never true in the page: {expression}"
            time.sleep(0.1)

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            stop_process(self._proc, 15.0)
