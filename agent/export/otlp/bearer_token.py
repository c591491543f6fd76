"""The bearer token the agent shows the Collector: a projected ServiceAccount token in a file.

The kubelet writes the token (audience: the Collector) into the pod and replaces it well before
it expires, by swapping the projected volume's ``..data`` link, so the file is stat'ed before each
export and read again when it is a different file or changed. A token that cannot be read keeps
the last good one (and is logged once per failure streak); no token at all sends no header, which
the Collector refuses, so the failure shows as ``export_failures_total{reason="http_4xx"}``.
"""

from __future__ import annotations

import logging
import os

__all__ = ["TokenFile"]

log = logging.getLogger(__name__)


class TokenFile:
    """``Authorization`` header value from a token file, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._token: str | None = None
        self._failing = False

    def authorization(self) -> str | None:
        """``Bearer <token>``, or None while no token has ever been read."""
        try:
            st = os.stat(self.path)
            identity = (st.st_ino, st.st_mtime_ns, st.st_size)
            if identity != self._seen:
                with open(self.path, encoding="ascii") as f:
                    token = f.read().strip()
                if token:
                    self._token, self._seen = token, identity
            self._failing = False
        except (OSError, UnicodeDecodeError) as exc:
            if not self._failing:
                log.warning("cannot read the OTLP token file %s (%s); %s", self.path, exc,
                            "keeping the last token" if self._token else "exporting without a token")
            self._failing = True
        return f"Bearer {self._token}" if self._token else None
