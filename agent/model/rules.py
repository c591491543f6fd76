"""Which Kubernetes version's request arithmetic is in force.

kube-scheduler and the cluster-autoscaler compute a pod's requests with the
k8s.io/component-helpers of their own release, and that arithmetic changed
between 1.36 and 1.37 (in-place resize: per-container maxima became the
maximum of whole-pod totals). The agent has to count as the cluster's own
components do, so the rules are a value chosen from the cluster's version;
only :mod:`agent.model.pod_requests` looks inside it.

A release whose PodRequests computes exactly what an earlier one does maps to
that release's rules (:data:`RELEASES`): 1.38's component-helpers
(v0.38.0-beta.0) changed PodRequests only behind the alpha DRA option
``UseDRANodeAllocatableResourceClaimStatus``, which kube-scheduler leaves off
by default and the agent never counts, so 1.38 uses the 1.37 rules.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import msgspec

__all__ = ["Rules", "RULES_1_36", "RULES_1_37", "SUPPORTED", "NEWEST", "OLDEST", "RELEASES", "KubernetesVersion",
           "VersionError", "parse_version", "parse_version_info", "rules_for"]


class Rules(msgspec.Struct, frozen=True):
    """One release's PodRequests (component-helpers ``resource`` at v0.<minor>)."""

    major: int
    minor: int

    @property
    def name(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return self.name


RULES_1_36 = Rules(1, 36)
RULES_1_37 = Rules(1, 37)
SUPPORTED: tuple[Rules, ...] = (RULES_1_36, RULES_1_37)
OLDEST, NEWEST = SUPPORTED[0], SUPPORTED[-1]

#: Every supported release (major, minor) and the rules it computes with. 1.38 (component-helpers
#: v0.38.0-beta.0) differs from 1.37 only in alpha DRA claim accounting and in AggregateContainerLimits,
#: neither of which the requests the scheduler counts depend on (tests/model/test_requests.py runs its table).
RELEASES: dict[tuple[int, int], Rules] = {(1, 36): RULES_1_36, (1, 37): RULES_1_37, (1, 38): RULES_1_37}
_OLDEST_RELEASE, _NEWEST_RELEASE = min(RELEASES), max(RELEASES)


class VersionError(ValueError):
    """Text that is not a Kubernetes version."""


class KubernetesVersion(NamedTuple):
    major: int
    minor: int
    # As written, e.g. "v1.37.2-gke.1", for logs and the info metric.
    text: str

    def __str__(self) -> str:
        return self.text


# "1.37", "1.37.2", "v1.37.2", "v1.37.2-gke.1", "v1.37.0-alpha.1+abc"; GKE and EKS also report minor "37+".
_VERSION = re.compile(r"v?(\d{1,4})\.(\d{1,4})\+?(?:\.\d{1,6})?(?:[-+][0-9A-Za-z.+-]*)?")


def parse_version(text: object) -> KubernetesVersion:
    """A Kubernetes version as ``--kubernetes-version`` and the API server's /version write it."""
    stripped = text.strip() if isinstance(text, str) else ""
    match = _VERSION.fullmatch(stripped)
    if match is None:
        raise VersionError("not a Kubernetes version (expected MAJOR.MINOR such as 1.37 or v1.37.2): "
                           f"{str(text)[:80]!r}")
    return KubernetesVersion(int(match[1]), int(match[2]), stripped)


def parse_version_info(info: object) -> KubernetesVersion:
    """The version in an API server's /version answer: ``gitVersion``, else ``major``.``minor``."""
    if not isinstance(info, dict):
        raise VersionError(f"/version answer is not an object but {type(info).__name__}")
    git_version = info.get("gitVersion")
    if isinstance(git_version, str) and git_version.strip():
        return parse_version(git_version)
    major, minor = info.get("major"), info.get("minor")
    if isinstance(major, str) and isinstance(minor, str):
        return parse_version(f"{major}.{minor}")
    raise VersionError("/version answer has neither gitVersion nor major and minor")


def rules_for(version: KubernetesVersion) -> tuple[Rules, str | None]:
    """The rules of ``version``, or of the nearest supported release plus one warning line."""
    wanted = (version.major, version.minor)
    rules = RELEASES.get(wanted)
    if rules is not None:
        return rules, None
    if wanted < _OLDEST_RELEASE:
        oldest = RELEASES[_OLDEST_RELEASE]
        return oldest, (f"Kubernetes {version} is older than the oldest supported release "
                        f"{'.'.join(map(str, _OLDEST_RELEASE))}; using the {oldest} rules")
    newest = RELEASES[_NEWEST_RELEASE]
    return newest, (f"Kubernetes {version} is newer than the newest supported release "
                    f"{'.'.join(map(str, _NEWEST_RELEASE))}; using the {newest} rules")
