"""Where the API server is and how to authenticate to it: one record the transport (``kube.KubeApi``) is built from.

In a pod the record comes from the service account folder and the Service's two variables without importing the
kubernetes package: its ``__init__`` imports every API class and model, some 20 MiB of a DaemonSet's memory on
every node (docs/benchmarks.md). Out of a pod (kubeconfig: ``explain --live``, the kubectl plugin, a developer's
laptop) the package still finds and authenticates (exec and OIDC plugins, expiring tokens): the record is read off
the ``Configuration`` it loaded, and the token comes from the package's own refresh hook at each request.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from agent.telemetry.log_limit import RateLimitedLog

__all__ = ["ApiEndpoint", "FileToken", "KubeConfigError", "KubeconfigToken", "TokenSource", "endpoint_of_configuration",
           "first_line", "in_cluster_endpoint", "TOKEN_REREAD_SECONDS"]

log = logging.getLogger(__name__)

# A token file is read again at least this often even when its stat looks the same, as client-go's
# CachedFileTokenSource does (transport/token_source.go: a cached file token is good for one minute).
TOKEN_REREAD_SECONDS = 60.0


class KubeConfigError(Exception):
    """No usable cluster configuration."""


class TokenSource(Protocol):
    """The Authorization header's value for the next request, and a fresh look after a 401."""

    def authorization(self) -> str | None:
        """``Bearer …``, or None when the client authenticates otherwise (a client certificate)."""

    def renew(self) -> bool:
        """After a 401: look again now; True when the header changed, so the request is worth one more try."""


class ApiEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """The API server and the TLS and credentials a connection to it takes (files, as the kubelet and the
    kubernetes package both leave them: the package writes kubeconfig's ``…-data`` to temporary files)."""

    server: str  # scheme://host:port, perhaps with a path prefix (an authenticating proxy's)
    ca_file: str | None = None  # None: the system's trust store
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None  # the name the server certificate is checked against, when not the host's
    proxy: str | None = None  # an http(s):// or socks5:// proxy, already decided against no_proxy
    tokens: TokenSource | None = None  # None: no bearer token (a client certificate authenticates)


def first_line(exc: BaseException) -> str:
    """An exception's first line (OpenSSL's and urllib3's run to several), else its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _file_problem(path: str, exc: OSError) -> str:
    """``path: No such file or directory`` (the errno's words, the path said once)."""
    return f"{path}: {exc.strerror or first_line(exc)}"


class _Stat(msgspec.Struct, frozen=True, kw_only=True):
    """What tells a rewritten or swapped file from the one read last, without reading it."""

    inode: int
    device: int
    mtime_ns: int
    size: int


def _stat(path: str) -> _Stat:
    st = os.stat(path)  # follows the kubelet's ``token -> ..data/token`` link: a swapped ``..data`` is a new inode
    return _Stat(inode=st.st_ino, device=st.st_dev, mtime_ns=st.st_mtime_ns, size=st.st_size)


class FileToken:
    """A projected service account token, re-read when the kubelet rotates it.

    The kubelet rotates the token well before it expires (at 80 % of its life) by swapping the ``..data`` link in
    one rename, so the file is never half-written. Each request stats the path (one system call; the agent makes a
    few requests a minute) and reads it again when the file changed or a minute has passed (client-go's rule), and
    at once after a 401. A file that vanishes or empties later is a warning: the token read last is kept, as it may
    still be valid. At start a missing, unreadable or empty file is a KubeConfigError naming it.
    """

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic,
                 reread: float = TOKEN_REREAD_SECONDS) -> None:
        self._path = path
        self._clock = clock
        self._reread = reread
        self._lock = threading.Lock()
        self._warn = RateLimitedLog(log, clock=clock)
        try:
            self._token, self._seen = self._read()
        except (OSError, ValueError) as exc:
            raise KubeConfigError(_file_problem(path, exc) if isinstance(exc, OSError) else str(exc)) from None
        self._read_at = clock()

    def _read(self) -> tuple[str, _Stat]:
        seen = _stat(self._path)
        with open(self._path, "rb") as f:
            token = f.read().decode("utf-8", errors="replace").strip()
        if not token:
            raise ValueError(f"{self._path}: the token file is empty")
        return token, seen

    def _refresh(self, force: bool) -> bool:
        """Read the file again if it changed (or ``force``, or a minute passed); True when the token changed."""
        now = self._clock()
        try:
            if not force and now - self._read_at < self._reread and _stat(self._path) == self._seen:
                return False
            token, seen = self._read()
        except (OSError, ValueError) as exc:
            why = _file_problem(self._path, exc) if isinstance(exc, OSError) else str(exc)
            self._warn.warning("token", "cannot read the service account token again (%s); the one read last "
                                        "is still used", why)
            return False
        changed = token != self._token
        self._token, self._seen, self._read_at = token, seen, now
        if changed:
            log.info("the service account token in %s changed; the new one is used from now on", self._path)
        return changed

    def authorization(self) -> str | None:
        with self._lock:
            self._refresh(force=False)
            return f"Bearer {self._token}"

    def renew(self) -> bool:
        with self._lock:
            return self._refresh(force=True)


class KubeconfigToken:
    """The kubernetes package's bearer token: its refresh hook runs exec plugins again when their token expired."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        self._lock = threading.Lock()

    def authorization(self) -> str | None:
        with self._lock:
            return self._configuration.get_api_key_with_prefix("BearerToken", alias="authorization")

    def renew(self) -> bool:
        """The package refreshes only an expired token; a 401 is worth one more try only if that gave a new one."""
        before = self._configuration.api_key.get("BearerToken")
        return self.authorization() is not None and self._configuration.api_key.get("BearerToken") != before


def _join_host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def in_cluster_endpoint(host: str, port: str | None, folder: str,
                        clock: Callable[[], float] = time.monotonic) -> ApiEndpoint:
    """The service account's record: ``https://host:port``, ``folder``/ca.crt and ``folder``/token.

    Every file is checked here, so a pod with a broken mount stops at start with one line naming the file.
    """
    if port is None or not port.strip():
        raise KubeConfigError("KUBERNETES_SERVICE_PORT is " + ("not set" if port is None else "empty"))
    port = port.strip()
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise KubeConfigError(f"KUBERNETES_SERVICE_PORT is {port!r}, not a port number")
    ca_file = os.path.join(folder, "ca.crt")
    try:
        with open(ca_file, "rb") as f:
            pem = f.read()
    except OSError as exc:
        raise KubeConfigError(_file_problem(ca_file, exc)) from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise KubeConfigError(f"{ca_file}: no CA certificate in it ({first_line(exc)})") from None
    tokens = FileToken(os.path.join(folder, "token"), clock=clock)
    return ApiEndpoint(server=f"https://{_join_host_port(host.strip(), port)}", ca_file=ca_file, tokens=tokens)


def endpoint_of_configuration(configuration: Any) -> ApiEndpoint:
    """The record of a ``kubernetes.client.Configuration`` the package loaded from kubeconfig files."""
    from kubernetes.client.rest import should_bypass_proxies

    proxy = configuration.proxy
    if proxy and should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
        proxy = None
    return ApiEndpoint(server=configuration.host, ca_file=configuration.ssl_ca_cert,
                       cert_file=configuration.cert_file, key_file=configuration.key_file,
                       verify=bool(configuration.verify_ssl), tls_server_name=configuration.tls_server_name or None,
                       proxy=proxy or None, tokens=KubeconfigToken(configuration))
