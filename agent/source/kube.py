"""HTTP access to the Kubernetes API: one urllib3 pool built from an ``endpoint.ApiEndpoint``.

Responses are read raw and decoded as JSON by the caller, never into model
objects. The kubernetes package is imported only to load kubeconfig files
(``load_configuration`` out of a pod); a pod's agent never imports it
(docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlencode

import urllib3

from agent.model.retry_after import retry_after_seconds
from agent.source.endpoint import (
    ApiEndpoint,
    KubeConfigError,
    endpoint_of_configuration,
    first_line,
    in_cluster_endpoint,
)

__all__ = ["ApiEndpoint", "ApiError", "ClusterAccess", "KubeApi", "KubeConfigError", "LineTooLong", "NotJson",
           "TransportError", "load_configuration", "TRANSPORT_ERRORS", "MAX_LINE_BYTES", "split_lines"]

log = logging.getLogger(__name__)

# One watch line is one object: etcd refuses values over 1.5 MiB by default
# and JSON adds at most a few times that. A longer line is a broken or
# hostile stream, not a pod.
MAX_LINE_BYTES = 8 * 1024 * 1024


class TransportError(Exception):
    """The connection failed below HTTP in a way urllib3 does not raise as a timeout or a reset: TLS, a proxy."""


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


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's defaults (no Nagle) plus keepalive; a platform without the TCP_KEEP* options gets what it has."""
    options = [*urllib3.connection.HTTPConnection.default_socket_options, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                        ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _is_json(content_type: str | None) -> bool:
    """The API server answers JSON when asked for it; an absent Content-Type is left to the body to decide."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


# What a dead, restarting or unreachable API server raises.
TRANSPORT_ERRORS = (TransportError, urllib3.exceptions.HTTPError, OSError)


class ApiError(Exception):
    """The API server answered with a non-2xx status (or a watch ERROR event)."""

    def __init__(self, status: int, reason: str = "", message: str = "", retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_status(cls, status: Mapping[str, Any], http_status: int = 0, retry_after: float | None = None) -> ApiError:
        code = status.get("code") if isinstance(status.get("code"), int) else http_status
        return cls(code or http_status, str(status.get("reason") or ""), str(status.get("message") or ""), retry_after)


class InCluster(Protocol):
    """Inside a pod: the API server's Service and the folder holding the service account's token and CA."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> str | None: ...
    @property
    def serviceaccount_dir(self) -> str: ...


class ClusterAccess(Protocol):
    """How to reach the API server, as the configuration resolved it (agent.config.ClusterAccess)."""

    @property
    def kubeconfig(self) -> str: ...  # one file, or files separated by os.pathsep as in KUBECONFIG
    @property
    def context(self) -> str | None: ...
    @property
    def in_cluster(self) -> InCluster | None: ...

    def described(self) -> str:
        """What is tried, for a message a person can act on."""


def _check_kubeconfig_files(paths: str) -> None:
    """Each kubeconfig file there is holds YAML with a mapping at the top and lists of entries in it, else a
    KubeConfigError naming the file: the kubernetes package would let PyYAML's multi-line error escape, or say
    "'str' object does not support item assignment". Missing files are left to the package, which names them."""
    import yaml

    from agent.source.documents import DumpError, decode_text, parse_reason

    for path in filter(None, paths.split(os.pathsep)):
        path = os.path.expanduser(path)
        text = ""
        try:
            with open(path, "rb") as f:
                text = decode_text(f.read())
            content = yaml.safe_load(text)
        except OSError:
            continue
        except (DumpError, yaml.YAMLError) as exc:
            reason = str(exc) if isinstance(exc, DumpError) else f"not YAML: {parse_reason(exc, text)}"
            raise KubeConfigError(f"cannot load Kubernetes configuration: {path} is not a kubeconfig: "
                                  f"{reason}") from None
        if content is None:
            continue  # empty: the package says so
        if not isinstance(content, dict):
            wrong = f"it holds a {type(content).__name__}, not a mapping of clusters, contexts and users"
        else:
            wrong = next((f"its {key} is not a list of entries" for key in ("clusters", "contexts", "users")
                          if content.get(key) is not None and not (isinstance(content[key], list)
                                                                   and all(isinstance(e, dict) for e in content[key]))),
                         "")
        if wrong:
            raise KubeConfigError(f"cannot load Kubernetes configuration: {path} is not a kubeconfig: {wrong}")


def load_configuration(access: ClusterAccess) -> ApiEndpoint:
    """The in-cluster service account inside a pod (without the kubernetes package), else the kubeconfig files
    (through it); a KubeConfigError of one line naming what is wrong otherwise."""
    if (in_cluster := access.in_cluster) is not None:
        try:
            return in_cluster_endpoint(in_cluster.host, in_cluster.port, in_cluster.serviceaccount_dir)
        except KubeConfigError as exc:
            raise KubeConfigError(f"cannot load Kubernetes configuration from {access.described()}: {exc}") from None
    from kubernetes import config as kube_config
    from kubernetes.client import Configuration

    configuration = Configuration()
    try:
        _check_kubeconfig_files(access.kubeconfig)
        kube_config.load_kube_config(config_file=access.kubeconfig, context=access.context,
                                     client_configuration=configuration)
    except (kube_config.ConfigException, OSError, TypeError, ValueError) as exc:
        raise KubeConfigError(f"cannot load Kubernetes configuration from {access.described()}: "
                              f"{str(exc).rstrip('.')}") from exc
    return endpoint_of_configuration(configuration)


def _pool(endpoint: ApiEndpoint) -> urllib3.PoolManager:
    """What the kubernetes package's RESTClientObject would build, with keepalive and no urllib3 retries."""
    pool_args: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if endpoint.verify else ssl.CERT_NONE,
        "ca_certs": endpoint.ca_file, "cert_file": endpoint.cert_file, "key_file": endpoint.key_file,
        "socket_options": keepalive_socket_options(),
        # No immediate urllib3 retries: each would be another request at a failing
        # API server; the reflector's jittered backoff decides when to try again.
        "retries": False,
        "maxsize": 10,  # the three watches, a LIST and /version at once, each kept for reuse (the package's 5 a core)
    }
    if endpoint.tls_server_name:
        pool_args["server_hostname"] = endpoint.tls_server_name
    if not endpoint.proxy:
        return urllib3.PoolManager(**pool_args)
    if endpoint.proxy.split(":", 1)[0].lower().startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(endpoint.proxy, **pool_args)
    return urllib3.ProxyManager(endpoint.proxy, **pool_args)


class KubeApi:
    def __init__(self, endpoint: ApiEndpoint, connect_timeout: float = 10.0,
                 wall: Callable[[], float] = time.time) -> None:
        """``wall`` is the time a Retry-After date is measured from."""
        self._endpoint = endpoint
        self._server = endpoint.server.rstrip("/")
        self._pool = _pool(endpoint)
        self._connect_timeout = connect_timeout
        self._wall = wall
        self._streams: set = set()
        self._streams_lock = threading.Lock()

    def interrupt(self) -> None:
        """Unblock every watch stream being read (for a prompt shutdown)."""
        with self._streams_lock:
            streams = list(self._streams)
        for response in streams:
            with contextlib.suppress(Exception):  # already closed: whatever a closed response raises, it is done
                response.shutdown()

    def close(self) -> None:
        self.interrupt()
        self._pool.clear()

    def _send(self, url: str, read_timeout: float) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": "application/json", "User-Agent": "node-requests-agent"}
        tokens = self._endpoint.tokens
        if tokens is not None and (authorization := tokens.authorization()):
            headers["Authorization"] = authorization
        try:
            return self._pool.request("GET", url, headers=headers, preload_content=False, retries=False,
                                      timeout=urllib3.Timeout(connect=self._connect_timeout, read=read_timeout))
        except urllib3.exceptions.SSLError as exc:
            raise TransportError(first_line(exc)) from None

    def _get(self, path: str, params: Mapping[str, str], read_timeout: float):
        url = self._server + path + (f"?{urlencode(list(params.items()))}" if params else "")
        response = self._send(url, read_timeout)
        if response.status == 401 and self._endpoint.tokens is not None and self._endpoint.tokens.renew():
            # A rotated token: the one sent was read before the rotation (or has just expired); once more.
            response.drain_conn()
            response.release_conn()
            response = self._send(url, read_timeout)
        if not 200 <= response.status <= 299:
            body = response.data
            response.release_conn()
            try:
                status = json.loads(body)
            except ValueError:
                status = {}
            if not isinstance(status, dict):
                status = {}
            raise ApiError.from_status(status, response.status,
                                       retry_after_seconds(response.headers.get("Retry-After"), self._wall()))
        content_type = response.headers.get("Content-Type")
        if content_type and not _is_json(content_type):
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
        (each byte is scanned for a newline once). The body comes through
        urllib3's public ``stream`` (chunk by chunk as each arrives, so an
        event is never held back waiting for more); a de-chunker of the
        agent's own off urllib3's private socket reader saved a few per cent
        of the event path at most (docs/benchmarks.md, ``bench/watch_read.py``).
        """
        response = self._get(path, params, read_timeout)
        with self._streams_lock:
            self._streams.add(response)
        try:
            yield from split_lines(response.stream(65536, decode_content=True), max_line)
        finally:
            # Dropping the connection (not returning it to the pool) when a
            # consumer stops early: a half-read watch cannot be reused.
            with self._streams_lock:
                self._streams.discard(response)
            response.close()
            response.release_conn()


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
