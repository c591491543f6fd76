"""What the autoscaler's local-storage drain rule reads of a pod, reduced when the pod is decoded.

drain.HasBlockingLocalStorage (the same in 1.31.1 and 1.36.1) blocks a pod
with a hostPath volume or an emptyDir volume not in memory whose name is not
one of the comma-separated names of safe-to-evict-local-volumes (split on
",", not trimmed; names that are no local volume of the pod are ignored).
The API server sets no bound on a pod's volumes, only etcd's request size
does: 45,000 emptyDir volumes fit in one pod, and a record keeping each name
weighed 2.69 MiB (issue 38). The rule needs only which local volumes are not
listed, and the agent shows the listed names that name none (a likely typo);
so that is what is kept, the first few of each and how many more.
"""

from __future__ import annotations

from agent.model.fields import MAX_ANNOTATION, bounded, clipped
from agent.model.pod import SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, LocalStorage

__all__ = ["SHOWN_LOCAL_VOLUMES", "SHOWN_UNKNOWN_NAMES", "local_storage"]

#: Names of blocking local volumes kept for the verdict's detail; the rest are counted. An honest pod mounts a
#: handful of scratch volumes, so its detail lists every one.
SHOWN_LOCAL_VOLUMES = 16
#: Names of safe-to-evict-local-volumes that are no local volume of the pod, kept (each clipped to
#: _UNKNOWN_CHARS) for the problem that says so; the rest are counted.
SHOWN_UNKNOWN_NAMES = 5
_UNKNOWN_CHARS = 40


def local_storage(local: list[str], listed: str | None, problems: list[str]) -> LocalStorage | None:
    """The local-storage facts of a pod whose local volumes are named ``local`` (pod order) and whose
    safe-to-evict-local-volumes is ``listed`` (None: absent); None when it has no local volume (the rule then
    never blocks). A list longer than MAX_ANNOTATION still decides which volumes block, but its names that are no
    volume are not shown (a problem says the list was too long to show)."""
    if not local:
        return None
    unknown: list[str] = []
    if listed is None:
        blocking = local
    else:
        names = listed.split(",")
        if len(listed) > MAX_ANNOTATION:
            problems.append(f"metadata.annotations[{SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION}] longer than "
                            f"{MAX_ANNOTATION} characters ({bounded(listed)}): only the names of the pod's local "
                            "volumes in it are read")
        else:
            volumes = set(local)
            unknown = [n for n in names if n not in volumes]
        listed_names = set(names)
        blocking = [v for v in local if v not in listed_names]
    if not blocking and not unknown:
        return _NONE_BLOCKING
    return LocalStorage(tuple(clipped(v) for v in blocking[:SHOWN_LOCAL_VOLUMES]),
                        max(0, len(blocking) - SHOWN_LOCAL_VOLUMES),
                        tuple(n[:_UNKNOWN_CHARS] for n in unknown[:SHOWN_UNKNOWN_NAMES]),
                        max(0, len(unknown) - SHOWN_UNKNOWN_NAMES))


_NONE_BLOCKING = LocalStorage()
