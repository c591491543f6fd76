"""Cutting a release: the agent's and the Collector's images and the Helm chart built at one version, pushed to an
OCI registry the operator names, and the release notes (``python -m release --help``; docs/deployment.md, Releases).

* ``version``: what a version may be and where a source tree carries it (stamped into a staged copy);
* ``notes``: the CHANGELOG's section for a version and the notes that list what was pushed;
* ``oci``: the registry reference, the check that it answers, and the pushes (crane for images, helm for the chart);
* ``publish``: the command, wiring the three to components/image.py's builds.
"""

__all__ = ["ReleaseError"]


class ReleaseError(Exception):
    """A release cannot go on: its message is the one line the command prints (no traceback)."""
