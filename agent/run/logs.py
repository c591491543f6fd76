"""The agent's log lines: text for a person (the default), or one JSON object a line for a log pipeline.

Every line goes through the root logger's one handler, the agent's own and its
libraries' (the kubernetes client, urllib3, Python warnings) alike. A JSON
line has ``time``, ``level``, ``logger`` and ``message``, the node the agent
watches (``k8s.node.name``) and, where a line is about a pod, the pod's
``k8s.namespace.name``, ``k8s.pod.name`` and ``k8s.pod.uid`` (OTel's
resource attribute names, passed as ``extra``). Whatever a message holds
(control characters, bytes that were not UTF-8) still makes one valid line.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

__all__ = ["JsonFormatter", "TEXT_FORMAT", "configure_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes a record may carry through ``extra`` that a JSON line keeps: OTel's resource attribute names.
_FIELD_PREFIX = "k8s."


def _clean(text: str) -> str:
    """Valid UTF-8 whatever the text held: a lone surrogate (an undecodable byte) becomes its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class JsonFormatter(logging.Formatter):
    def __init__(self, node_name: str = "") -> None:
        super().__init__()
        self._node = node_name

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": _clean(record.getMessage()),
        }
        if self._node:
            line["k8s.node.name"] = self._node
        for key, value in vars(record).items():
            if key.startswith(_FIELD_PREFIX):
                line[key] = _clean(str(value))
        if record.exc_info:
            line["exception"] = _clean(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = _clean(self.formatStack(record.stack_info))
        # ensure_ascii=False keeps names readable; control characters are still escaped, so it is one line.
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: str, fmt: str, node_name: str = "", stream: TextIO | None = None) -> None:
    """One handler on the root logger, in ``fmt`` (one of config's LOG_FORMATS, checked there), replacing any
    configured before."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(node_name) if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # a library's warnings.warn is a log line too, in the same format
