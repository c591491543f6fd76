"""The operator's OCI registry: its name checked, asked whether it answers at all, then pushed to (crane for the
images' docker-archives, helm for the chart package). Credentials are crane's and helm's own (``crane auth login``,
``helm registry login``): nothing here reads or writes one. A refusal is one line naming what was refused."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from release import ReleaseError

__all__ = ["Pushed", "RegistryName", "check_answers", "parse_registry", "push_chart", "push_image"]

# The distribution spec's grammar (reference.go): a host with an optional port, then lowercase path components.
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = re.compile(rf"(?P<host>{_HOST}(?::[0-9]{{1,5}})?)(?P<path>(?:/{_COMPONENT})*)")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class RegistryName:
    """``HOST[:PORT][/PATH]``: where every part of the release goes (``/charts`` under it for the chart)."""

    host: str
    path: str  # "" or "/a/b"

    def __str__(self) -> str:
        return self.host + self.path


@dataclass(frozen=True, kw_only=True)
class Pushed:
    """What a push left in the registry: its reference (with the tag) and the manifest's digest."""

    reference: str
    digest: str


def parse_registry(text: str) -> RegistryName:
    match = _REGISTRY.fullmatch(text.strip().removeprefix("oci://").rstrip("/"))
    if not match:
        raise ReleaseError(f"registry {text!r} is not HOST[:PORT][/PATH] (lowercase path components)")
    return RegistryName(host=match["host"], path=match["path"])


def check_answers(registry: RegistryName, plain_http: bool, timeout: float = 10.0) -> None:
    """The registry's API root answers over HTTP at all (any status: 401 is a registry asking for credentials, which
    crane and helm then present); nothing is built for a registry that is not there."""
    url = f"{'http' if plain_http else 'https'}://{registry.host}/v2/"
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise ReleaseError(f"registry {registry.host} does not answer at {url}: {reason}") from None


def _refusal(output: str) -> str:
    """The line of a tool's output that says why (its last ``Error:`` line, else its last line), shortened."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    said = (errors or lines or ["(no output)"])[-1]
    return said if len(said) <= 400 else said[:400] + "..."


def push_image(crane: Path, archive: Path, reference: str, plain_http: bool) -> Pushed:
    """``crane push`` of a docker-archive as ``reference`` (REGISTRY/NAME:TAG)."""
    proc = subprocess.run([str(crane), "push", *(["--insecure"] if plain_http else []), str(archive), reference],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    digest = _DIGEST.search(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")
    if proc.returncode != 0 or digest is None:
        raise ReleaseError(f"the registry refused image {reference}: {_refusal(proc.stdout)}")
    return Pushed(reference=reference, digest=digest.group())


def push_chart(helm: Path, package: Path, registry: RegistryName, plain_http: bool, chart_ref: str) -> Pushed:
    """``helm push`` of a packaged chart to ``oci://REGISTRY/charts``; ``chart_ref`` is where it lands
    (REGISTRY/charts/NAME:VERSION)."""
    proc = subprocess.run([str(helm), "push", str(package), f"oci://{registry}/charts",
                           *(["--plain-http"] if plain_http else [])],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    digest = re.search(r"Digest: (sha256:[0-9a-f]{64})", proc.stdout)
    if proc.returncode != 0 or digest is None:
        raise ReleaseError(f"the registry refused chart {chart_ref}: {_refusal(proc.stdout)}")
    return Pushed(reference=chart_ref, digest=digest.group(1))
