"""The ``explain`` command: a dump or one LIST of the live cluster, valued and printed node by node.

The I/O of the command lives here (files, the API server, the terminal);
what it computes is in ``view`` and what it prints in ``agent.report``.
"""

from __future__ import annotations

import argparse
import sys

from agent.config import SETTINGS, ClusterAccess
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER, AutoscalerSettings
from agent.model.rules import NEWEST, KubernetesVersion

__all__ = ["explain", "list_live", "EXIT_CONFIG", "EXIT_FAILED"]

EXIT_CONFIG = 2
EXIT_FAILED = 1


class _Failed(Exception):
    def __init__(self, message: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(message)
        self.code = code


def explain(args: argparse.Namespace, cluster: ClusterAccess,
            autoscaler: AutoscalerSettings = DEFAULT_AUTOSCALER, version: KubernetesVersion | None = None) -> int:
    """The ``explain`` command: read a dump or (--live) list the ``cluster``, value every pod, print per node;
    ``autoscaler``: the autoscaler's settings the verdicts follow, ``version``: the Kubernetes release whose rules
    count (None: the API server's with --live, else the newest), both resolved by the CLI from flags and environment."""
    import shutil
    import time

    from agent.explain.view import explain_json, explain_view, nodes_only, pods_dump, rules_line, verdicts
    from agent.model.cluster import pod_filter
    from agent.model.rules import rules_for
    from agent.report.cluster_table import cluster_table
    from agent.report.columns import clip
    from agent.source.documents import DumpError

    from_server = False
    try:
        if args.live:
            if args.file != "-" or args.node_file:
                raise _Failed("--live reads the cluster: give no input file or --node-file")
            from_server = version is None
            read, server_version = list_live(args, cluster, ask_version=from_server)
            version = version or server_version
        else:
            if args.kubeconfig or args.context:
                raise _Failed("--kubeconfig and --context read the cluster: add --live")
            where = "standard input" if args.file == "-" else args.file
            read = pods_dump(_read(args.file, where), where)
            if args.node_file is not None:
                read = read._replace(nodes=read.nodes + nodes_only(_read(args.node_file, args.node_file),
                                                                   args.node_file))
        read_problems = tuple(p for p in (read.pdbs_error, read.controllers_error) if p)
        now = time.time() if args.at is None else _moment(args.at)
        rules, warning = (NEWEST, None) if version is None else rules_for(version)
        view = explain_view(read.pods, read.nodes, rules, args.node, args.sort)
        # The verdict at this moment, or --at's (a kube-system pod stops blocking after the autoscaler's timeout).
        judged = verdicts(view, read.pdbs, autoscaler, now, read_problems, read.controllers,
                          max_pdbs=SETTINGS["max_pdbs"].default)  # as an agent with the default keeps them
    except (OSError, UnicodeDecodeError, DumpError, _Failed) as exc:
        print(f"node-requests-agent explain: {exc}", file=sys.stderr)
        return getattr(exc, "code", EXIT_CONFIG)
    for reason in read.skipped:
        print(f"node-requests-agent explain: skipped an object: {reason}", file=sys.stderr)
    if warning:
        print(f"node-requests-agent explain: {warning}", file=sys.stderr)
    for problem in read_problems:
        print(f"node-requests-agent explain: {problem}", file=sys.stderr)
    shown = pod_filter(args.namespace, args.source, args.problems)
    if args.output == "json":
        print(explain_json(view, rules, shown, judged))
    else:
        width = shutil.get_terminal_size((120, 24)).columns
        print(clip(rules_line(rules, version, from_server), None if args.output == "wide" else width))
        print(cluster_table(view, shown, width=width, wide=args.output == "wide", verdicts=judged))
    return 0


def _moment(text: str) -> float:
    """--at's RFC 3339 time (an offset or Z; none: UTC) as seconds since the epoch."""
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise _Failed(f"--at {text[:40]!r} is not an RFC 3339 time (e.g. 2026-12-05T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _read(path: str, where: str) -> list:
    """The documents of an input file, or one line naming it and saying what is wrong (unreadable, not text, where
    the parser stopped)."""
    from agent.source.documents import DumpError, read_documents
    from agent.source.replay import load_capture

    try:
        return read_documents(load_capture(path))
    except DumpError as exc:
        raise _Failed(f"cannot read {where}: {exc}") from None


def list_live(args: argparse.Namespace, cluster: ClusterAccess, ask_version: bool = False):
    """One LIST of pods, one of Nodes, one of PDBs and one of each controller kind through the agent's own source code
    (``ClusterObjects``); the API server's version if asked."""
    from agent.model.rules import VersionError
    from agent.source.cluster_list import list_cluster
    from agent.source.kube import TRANSPORT_ERRORS, ApiError, KubeApi, KubeConfigError, load_configuration
    from agent.source.server_version import read_server_version

    try:
        api = KubeApi(load_configuration(cluster))
    except KubeConfigError as exc:
        raise _Failed(f"{exc}; pass --kubeconfig FILE (or --context), or explain a dump: "
                      "kubectl get nodes,pods -A -o json | node-requests-agent explain") from None
    try:
        listed = list_cluster(api, args.node)
        version = None
        if ask_version:
            try:
                version = read_server_version(api)
            except (ApiError, *TRANSPORT_ERRORS, VersionError) as exc:
                print(f"node-requests-agent explain: cannot read the API server's version ({exc}); using the {NEWEST} "
                      "rules", file=sys.stderr)
        return listed, version
    except (ApiError, *TRANSPORT_ERRORS, ValueError) as exc:
        raise _Failed(f"cannot list pods and nodes from the cluster: {exc}", EXIT_FAILED) from None
    finally:
        api.close()
