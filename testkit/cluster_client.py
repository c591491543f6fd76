"""Requests to a running test control plane: JSON over HTTPS as its admin or with a bearer token, watches, the
built kubectl, and the components' own metrics."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testkit.pki import Pki, write_kubeconfig
from testkit.waiting import wait_until


class ApiError(RuntimeError):
    """An apiserver answer other than 2xx, with the Status body for assertions."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


def rfc3339(at: dt.datetime | None = None) -> str:
    """``at`` (default now) as the API writes timestamps: UTC, whole seconds."""
    return (at or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_prometheus_text(text: str, metric: str) -> list[dict]:
    """Samples of one metric as label dicts with a float ``value``, read by prometheus_client's own parser."""
    return [{**sample.labels, "value": sample.value}
            for family in text_string_to_metric_families(text) for sample in family.samples if sample.name == metric]


class ClusterClient:
    """The client side of a control plane: what tests ask of it once it serves. Cluster (testkit/cluster.py)
    is one; it sets ``ports`` and ``pki`` as it starts and names the ``kubectl_binary`` of its version."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.ports: dict[str, int] = {}
        self.pki: Pki | None = None
        self._context: ssl.SSLContext | None = None
        self._token_context: ssl.SSLContext | None = None

    @property
    def kubectl_binary(self) -> Path:
        """The kubectl built for this control plane's version."""
        raise NotImplementedError

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def scheduler_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['scheduler']}"

    @property
    def controller_manager_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['controller-manager']}"

    def kubeconfig_path(self, user: str) -> Path:
        return self.workdir / f"{user}.kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig_path("admin")

    def admin_tls(self) -> ssl.SSLContext:
        """Verifies servers against the cluster CA and presents the admin (system:masters) client certificate."""
        if self._context is None:
            context = ssl.create_default_context(cafile=str(self.pki.crt("ca")))
            context.load_cert_chain(str(self.pki.crt("admin")), str(self.pki.key("admin")))
            self._context = context
        return self._context

    def _get_text(self, url: str, timeout: float = 5.0) -> str:
        context = self.admin_tls() if url.startswith("https:") else None
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.read().decode()

    def _tls_anonymous(self) -> ssl.SSLContext:
        """Verifies the server, presents no certificate: for requests that authenticate with a bearer token."""
        if self._token_context is None:
            self._token_context = ssl.create_default_context(cafile=str(self.pki.crt("ca")))
        return self._token_context

    def api(self, method: str, path: str, body: object = None, content_type: str | None = None,
            timeout: float = 30.0, token: str | None = None) -> dict:
        """JSON over HTTPS as the admin, or as whoever ``token`` belongs to; PATCH defaults to a merge patch,
        errors raise ApiError with the Status."""
        data = None if body is None else json.dumps(body).encode()
        if content_type is None:
            content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        context = self.admin_tls() if token is None else self._tls_anonymous()
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise ApiError(method, path, error.code, error.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else {}

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 5) -> Iterator[dict]:
        """The events of one WATCH of ``path`` from ``resource_version``, as the admin, until the server ends it
        after ``timeout_seconds``; a caller that must see every change re-watches from the last event's
        resourceVersion, as client-go's reflector does."""
        query = f"watch=true&resourceVersion={resource_version}&timeoutSeconds={timeout_seconds}"
        url = f"{self.server}{path}{'&' if '?' in path else '?'}{query}"
        with urllib.request.urlopen(url, timeout=timeout_seconds + 30, context=self.admin_tls()) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    def create_namespace(self, prefix: str) -> str:
        """A fresh namespace, returned once pods can be created in it (its default ServiceAccount exists)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_until(lambda: self.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60, interval=0.25,
                   message=f"default ServiceAccount in {name} (made by kube-controller-manager)")
        return name

    def events_of(self, namespace: str, name: str) -> list[dict]:
        """The Events about the object ``name`` of ``namespace`` (the kubelet's, a controller's), oldest first."""
        path = f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}"
        return self.api("GET", path).get("items", [])

    def exists(self, path: str) -> bool:
        try:
            self.api("GET", path)
            return True
        except ApiError as error:
            if error.status == 404:
                return False
            raise

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60.0,
                token: str | None = None) -> subprocess.CompletedProcess:
        """The built kubectl as admin, or with a bearer ``token`` only; callers check returncode so failures can be
        asserted on too."""
        kubeconfig = self.admin_kubeconfig
        if token is not None:
            kubeconfig = write_kubeconfig(self.workdir / f"token-{hashlib.sha256(token.encode()).hexdigest()[:12]}.kubeconfig", self.server,
                                          self.pki, "bearer", token=token)
        return subprocess.run([str(self.kubectl_binary), f"--kubeconfig={kubeconfig}", *args],
                              input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)

    def version(self) -> dict:
        return self.api("GET", "/version")

    def apiserver_metrics_text(self) -> str:
        """kube-apiserver's own /metrics, read as the admin (one scrape, for several metrics at one instant)."""
        return self._get_text(self.server + "/metrics", timeout=30)

    def apiserver_metrics(self, metric: str) -> list[dict]:
        """Samples of one of kube-apiserver's own metrics (``apiserver_request_total``...)."""
        return parse_prometheus_text(self.apiserver_metrics_text(), metric)

    def scheduler_resource_metrics(self) -> list[dict]:
        """``kube_pod_resource_request`` samples: the scheduler's own view of each pod's requests, an oracle for the agent."""
        text = self._get_text(self.scheduler_url + "/metrics/resources", timeout=10)
        return parse_prometheus_text(text, "kube_pod_resource_request")
