"""HTTP access to the Kubernetes API through the official kubernetes package.

The package provides configuration loading (in-cluster, kubeconfig, TLS,
exec and token plugins, token refresh) and the urllib3 transport; responses
are read raw and decoded as JSON by the caller, never into model objects.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import urllib3

__all__ = ["ApiError", "KubeApi", "KubeConfigError", "LineTooLong", "NotJson", "TransportError", "load_configuration",
           "config_sources", "TRANSPORT_ERRORS", "MAX_LINE_BYTES", "SERVICEACCOUNT_DIR", "SERVICEACCOUNT_DIR_ENV",
           "split_lines", "dechunk"]

log = logging.getLogger(__name__)

# One watch line is one object: etcd refuses values over 1.5 MiB by default
# and JSON adds at most a few times that. A longer line is a broken or
# hostile stream, not a pod.
MAX_LINE_BYTES = 8 * 1024 * 1024

# Where the kubelet projects the pod's service-account token and the cluster CA.
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Another folder for them: lets tests start the agent exactly as in a pod, token files included.
SERVICEACCOUNT_DIR_ENV = "NRA_SERVICEACCOUNT_DIR"


class TransportError(Exception):
    """The connection failed below HTTP (the kubernetes package's ApiException with status 0: TLS, proxy)."""


class LineTooLong(Exception):
    """A watch line grew past MAX_LINE_BYTES without a newline."""


class NotJson(ValueError):
    """A 2xx answer whose Content-Type says it is not JSON (a proxy's or a captive portal's HTML page)."""


# TCP keepalive on every API connection: probed after 30 s idle, every 5 s, dropped after 3 unanswered
# probes, so a connection that died silently (a black-holed API server, a vanished NAT entry) fails within
# about 45 s, as client-go's HTTP/2 health check notices it (30 s ping, 15 s timeout). The read timeout
# stays long: a quiet watch legitimately hears nothing between bookmarks, but its peer's kernel still
# answers keepalive probes.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 5, 3


def _is_json(content_type: str | None) -> bool:
    """The API server answers JSON when asked for it; an absent Content-Type is left to the body to decide."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


# What a dead, restarting or unreachable API server raises.
TRANSPORT_ERRORS = (TransportError, urllib3.exceptions.HTTPError, OSError)


class KubeConfigError(Exception):
    """No usable cluster configuration."""


class ApiError(Exception):
    """The API server answered with a non-2xx status (or a watch ERROR event)."""

    def __init__(self, status: int, reason: str = "", message: str = "", retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def expired(self) -> bool:
        """410 Gone: the resourceVersion is compacted away; only a relist helps."""
        return self.status == 410

    @classmethod
    def from_status(cls, status: Mapping[str, Any], http_status: int = 0, retry_after: float | None = None) -> ApiError:
        code = status.get("code") if isinstance(status.get("code"), int) else http_status
        return cls(code or http_status, str(status.get("reason") or ""), str(status.get("message") or ""), retry_after)


def load_configuration(kubeconfig: str | None = None, context: str | None = None,
                       environ: Mapping[str, str] = os.environ):
    """In-cluster configuration inside a pod, else KUBECONFIG / ~/.kube/config.

    In-cluster, the token file is re-read every minute (the kubernetes
    package's refresh, as client-go does), so a token the kubelet rotated on
    disk is used before the old one expires.
    """
    from kubernetes import config as kube_config
    from kubernetes.client import Configuration
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = Configuration()
    try:
        if kubeconfig is None and context is None and environ.get("KUBERNETES_SERVICE_HOST"):
            folder = environ.get(SERVICEACCOUNT_DIR_ENV) or SERVICEACCOUNT_DIR
            InClusterConfigLoader(os.path.join(folder, "token"), os.path.join(folder, "ca.crt"),
                                  environ=environ).load_and_set(configuration)
        else:
            kube_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    except (kube_config.ConfigException, OSError, TypeError, ValueError) as exc:
        raise KubeConfigError(f"cannot load Kubernetes configuration from {config_sources(kubeconfig, context)}: "
                              f"{str(exc).rstrip('.')}") from exc
    from kubernetes.utils.keepalive import tcp_keepalive_socket_options

    configuration.socket_options = tcp_keepalive_socket_options(KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
    # No immediate urllib3 retries: each would be another request at a failing
    # API server; the reflector's jittered backoff decides when to try again.
    configuration.retries = False
    return configuration


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class KubeApi:
    def __init__(self, configuration, connect_timeout: float = 10.0) -> None:
        from kubernetes.client.api_client import ApiClient
        from kubernetes.client.exceptions import ApiException

        self._api_exception = ApiException
        self._client = ApiClient(configuration)
        self._client.user_agent = "node-requests-agent"
        self._connect_timeout = connect_timeout
        self._streams: set = set()
        self._streams_lock = threading.Lock()

    def interrupt(self) -> None:
        """Unblock every watch stream being read (for a prompt shutdown)."""
        with self._streams_lock:
            streams = list(self._streams)
        for response in streams:
            try:
                response.shutdown()
            except Exception:  # already closed
                pass

    def close(self) -> None:
        self.interrupt()
        self._client.close()

    def _get(self, path: str, params: Mapping[str, str], read_timeout: float):
        method, url, headers, _, _ = self._client.param_serialize(
            "GET", path, query_params=list(params.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(method, url, headers,
                                             _request_timeout=(self._connect_timeout, read_timeout)).response
        except self._api_exception as exc:
            if exc.status:  # the package raises for some statuses itself; keep them HTTP answers
                raise ApiError(exc.status, str(exc.reason or ""), "") from None
            raise TransportError(str(exc.reason or exc).strip().splitlines()[0] or "connection failed") from None
        if not 200 <= response.status <= 299:
            body = response.data
            response.release_conn()
            try:
                status = json.loads(body)
            except ValueError:
                status = {}
            if not isinstance(status, dict):
                status = {}
            raise ApiError.from_status(status, response.status, _retry_after(response.headers))
        content_type = response.headers.get("Content-Type")
        if not _is_json(content_type):
            response.close()
            response.release_conn()
            raise NotJson(f"the answer is {content_type[:60]!r}, not JSON (a proxy in the way?)")
        return response

    def get_chunks(self, path: str, params: Mapping[str, str], read_timeout: float = 60.0,
                   chunk_size: int = 65536) -> Iterator[bytes]:
        """The body of a (LIST) answer as it arrives, so a reader never needs all of it at once.

        Each socket read waits at most ``read_timeout``. A body read to the end
        returns the connection to the pool; one abandoned half-way closes it.
        """
        response = self._get(path, params, read_timeout)
        complete = False
        try:
            yield from response.stream(chunk_size, decode_content=True)
            complete = True
        finally:
            if not complete:
                response.close()
            response.release_conn()

    def get_json(self, path: str, params: Mapping[str, str], read_timeout: float = 60.0) -> Any:
        """A small answer (such as /version), parsed; a bad UTF-8 byte is read as a replacement character."""
        data = b"".join(self.get_chunks(path, params, read_timeout))
        return json.loads(data.decode("utf-8", errors="replace"))

    def stream_lines(self, path: str, params: Mapping[str, str], read_timeout: float,
                     max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
        """Yield the newline-delimited lines of a streaming (watch) response.

        Each socket read waits at most ``read_timeout``: a half-open
        connection raises urllib3's ReadTimeoutError instead of hanging. A
        line longer than ``max_line`` raises LineTooLong; buffering is linear
        (each byte is scanned for a newline once).
        """
        response = self._get(path, params, read_timeout)
        with self._streams_lock:
            self._streams.add(response)
        try:
            yield from split_lines(_body(response), max_line)
        finally:
            # Dropping the connection (not returning it to the pool) when a
            # consumer stops early: a half-read watch cannot be reused.
            with self._streams_lock:
                self._streams.discard(response)
            response.close()
            response.release_conn()


def _body(response, size: int = 65536) -> Iterator[bytes]:
    """A watch body as it arrives. Chunked and not encoded (what the API server sends): read off the socket's
    buffer with one ``read1`` per TLS record and de-chunked here, a quarter of the transport's CPU time less
    than urllib3's per-chunk reading (three reads and a decoder pass per event). Anything else: urllib3's way.

    A socket timeout is urllib3's ReadTimeoutError, as from urllib3's own reading. The socket's reader is
    urllib3's ``_fp`` (the standard library's response) and its ``fp``; were they ever renamed, urllib3 reads."""
    raw = getattr(getattr(response, "_fp", None), "fp", None)
    if not response.chunked or response.headers.get("Content-Encoding", "identity") != "identity" or raw is None:
        yield from response.stream(size, decode_content=True)
        return
    try:
        yield from dechunk(raw.read1, size)
    except TimeoutError as exc:
        raise urllib3.exceptions.ReadTimeoutError(None, "", f"Read timed out. ({exc})") from None


def dechunk(read: Callable[[int], bytes], size: int = 65536) -> Iterator[bytes]:
    """The data of a chunked HTTP/1.1 body, each ``read(size)`` handed on as it comes (one slice per chunk in it).

    Errors as urllib3 raises them: a body that ends before its last chunk, or a size line that is not hex, is a
    ProtocolError.
    """
    left = 0  # data bytes of the current chunk still to come
    crlf = 0  # bytes of the CRLF after a chunk's data still to skip
    pending = b""  # an incomplete size line, carried to the next read
    while True:
        data = read(size)
        if not data:
            raise urllib3.exceptions.ProtocolError("Response ended prematurely")
        if pending:
            data, pending = pending + data, b""
        pos, end = 0, len(data)
        while pos < end:
            if left:
                piece = data if not pos and end <= left else data[pos:pos + left]
                left -= len(piece)
                pos += len(piece)
                yield piece
                if not left:
                    crlf = 2
            elif crlf:
                skip = min(crlf, end - pos)
                crlf -= skip
                pos += skip
            else:
                newline = data.find(b"\n", pos)
                if newline < 0:
                    pending = data[pos:]
                    if len(pending) > 1024:
                        raise urllib3.exceptions.ProtocolError("Response chunk size line exceeded maximum allowed length")
                    break
                line = data[pos:newline].split(b";", 1)[0]
                try:
                    left = int(line, 16)
                except ValueError:
                    raise urllib3.exceptions.ProtocolError(f"Invalid chunk length {line[:40]!r}") from None
                if left < 0:
                    raise urllib3.exceptions.ProtocolError(f"Invalid chunk length {line[:40]!r}")
                pos = newline + 1
                if not left:
                    return  # the last chunk (trailers, if any, are left unread: the connection is closed after)


def split_lines(chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Non-blank lines of a chunked byte stream, each at most ``max_line`` bytes."""
    buffer = bytearray()
    for chunk in chunks:
        scanned = len(buffer)
        buffer += chunk
        start = 0
        while (newline := buffer.find(b"\n", scanned)) >= 0:
            if newline - start > max_line:
                raise LineTooLong(f"watch line longer than {max_line} bytes")
            line = bytes(buffer[start:newline])
            if line.strip():
                yield line
            start = scanned = newline + 1
        del buffer[:start]
        if len(buffer) > max_line:
            raise LineTooLong(f"watch line longer than {max_line} bytes")
    if bytes(buffer).strip():
        yield bytes(buffer)


def config_sources(kubeconfig: str | None = None, context: str | None = None,
                   env: Mapping[str, str] = os.environ) -> str:
    """What ``load_configuration`` tried, in its order, for a message a person can act on."""
    if kubeconfig:
        return f"kubeconfig {kubeconfig}"
    if context is None and env.get("KUBERNETES_SERVICE_HOST"):
        return "the in-cluster service account"
    files = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p] or [os.path.expanduser("~/.kube/config")]
    skipped = "" if context is not None else " (in-cluster skipped: KUBERNETES_SERVICE_HOST is not set)"
    return f"kubeconfig {', '.join(files)}{skipped}"
