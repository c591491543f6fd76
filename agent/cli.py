"""The command line: parse, then hand over to the command's own package (``run``, ``explain``).

As the DaemonSet runs it (``run`` and nothing else: every setting comes from
the environment) there is nothing to parse, so no parser is built and argparse
is never imported: its 0.35 MiB of code would otherwise stay resident for the
life of the agent on every node.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent import __version__
from agent.config import EXPORTERS, ConfigError, from_sources
from agent.model.rules import NEWEST

if TYPE_CHECKING:
    import argparse

EXIT_CONFIG = 2


COMMANDS = ("run", "explain")


def _prog() -> str:
    """``kubectl node-requests`` when run as the kubectl plugin (kubectl execs ``kubectl-node_requests``)."""
    return "kubectl node-requests" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "node-requests-agent"


def _parser(prog: str = "node-requests-agent") -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Per-node agent: exports what each pod costs the cluster-autoscaler "
                    "(NeonVM usage, else effective requests) as OpenTelemetry metrics.")
    version = dict(action="version", version=f"node-requests-agent {__version__}", help="print the version and exit")
    parser.add_argument("--version", **version)
    sub = parser.add_subparsers(dest="command", metavar="{run,explain}")

    run = sub.add_parser("run", help="run the agent (the default command)",
                         description="Watch this node's pods and push their values over OTLP.")
    run.add_argument("--version", **version)
    run.add_argument("--node-name", help="the node to watch (env NODE_NAME; required)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG or ~/.kube/config)")
    run.add_argument("--context", help="kubeconfig context to use")
    run.add_argument("--replay", metavar="FILE",
                     help="replay a capture (pod list + watch events) instead of watching a cluster; 'sample' is the bundled sample node")
    run.add_argument("--once", action="store_true", help="with --replay: export once after the capture is handled, then exit")
    run.add_argument("--exporter", choices=EXPORTERS, help="metric exporter (env OTEL_METRICS_EXPORTER; default otlp)")
    run.add_argument("--export-interval", type=float, metavar="SECONDS",
                     help="seconds between exports (env OTEL_METRIC_EXPORT_INTERVAL in ms; default 15)")
    run.add_argument("--export-timeout", type=float, metavar="SECONDS",
                     help="seconds one export may take (env OTEL_METRIC_EXPORT_TIMEOUT in ms; default 10)")
    run.add_argument("--read-timeout", type=float, metavar="SECONDS",
                     help="longest silence on a watch before it is treated as dead and resumed (default 120)")
    run.add_argument("--debug-address", metavar="HOST:PORT",
                     help="read-only debug endpoint and probes (env DEBUG_ADDRESS; default :9808, 'off' to disable; "
                          "off by default with --once)")
    run.add_argument("--debug-views", choices=("local", "any"),
                     help="who may read the debug views (pods, node, runtime, /metrics, the page): local, only "
                          "loopback peers such as kubectl port-forward, or any (env DEBUG_VIEWS; default local); "
                          "the probes answer everyone")
    run.add_argument("--debug-host", action="append", metavar="NAME",
                     help="a Host name the debug views accept besides localhost and IP literals (DNS rebinding "
                          "protection); repeatable (env DEBUG_HOSTS, comma-separated)")
    run.add_argument("--procfs", metavar="PATH",
                     help="the /proc to read the used series from (env HOST_PROC; default /proc, whose stat and meminfo "
                          "are host-wide inside a container; 'off')")
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (env LOG_LEVEL; default INFO)")
    run.add_argument("--log-format", metavar="FORMAT",
                     help="text (default) or json: one JSON object per line with time, level, logger, message and "
                          "the node and pod it is about (env LOG_FORMAT)")
    run.add_argument("--kubernetes-version", metavar="X.Y",
                     help="count requests with this Kubernetes release's rules (default: the API server's own version "
                          "from /version, re-read after every relist; the newest supported with --replay)")

    explain = sub.add_parser("explain", help="explain, node by node, what the agent would export for a dump or a live cluster",
                             description="Read pods and Nodes (a Pod, a List such as `kubectl get nodes,pods -A -o json`, "
                                         "or a watch capture, JSON or YAML), or list them from the cluster with --live, "
                                         "and print per node what each pod costs the cluster-autoscaler and why.")
    explain.add_argument("--version", **version)
    explain.add_argument("file", nargs="?", default="-",
                         help="input file, - for standard input (default), or 'sample' for the bundled sample node")
    explain.add_argument("--output", "-o", choices=("table", "wide", "json"), default="table",
                         help="table (fits the terminal), wide (every column and name in full) or json")
    explain.add_argument("--node-file", metavar="FILE",
                         help="a Node object (JSON or YAML) for the node comparisons; Nodes inside the input work too")
    explain.add_argument("--node", metavar="NAME", help="only this node's pods and comparisons")
    explain.add_argument("--namespace", "-n", metavar="NS", help="only pods of this namespace (node sums still cover every pod)")
    explain.add_argument("--source", choices=("vm_usage", "pod_requests"), help="only pods valued this way")
    explain.add_argument("--problems", action="store_true", help="only pods whose input had problems")
    explain.add_argument("--sort", choices=("busy", "cpu", "memory", "name"), default="busy",
                         help="node and pod order: busy (pod_or_vm / allocatable, the larger of cpu and memory; default), "
                              "cpu, memory or name")
    explain.add_argument("--live", action="store_true",
                         help="read pods and Nodes from the cluster (one LIST each, no watch) instead of a file")
    explain.add_argument("--kubeconfig", help="with --live: kubeconfig file (default: in-cluster, else KUBECONFIG or ~/.kube/config)")
    explain.add_argument("--context", help="with --live: kubeconfig context to use")
    explain.add_argument("--kubernetes-version", metavar="X.Y",
                         help=f"count requests with this Kubernetes release's rules (default: with --live the API "
                              f"server's own version, else {NEWEST}, the newest supported)")
    return parser


def _unknown_command(word: str) -> str:
    import difflib

    close = difflib.get_close_matches(word, COMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown command {word!r}{hint}; commands: {', '.join(COMMANDS)}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = _prog()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(f"{prog}: {_unknown_command(argv[0])}", file=sys.stderr)
        return EXIT_CONFIG
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "run")
    if argv == ["run"]:
        flags: dict[str, object] = {}  # no flag given: what the parser would return, every option unset
    else:
        args = _parser(prog).parse_args(argv)
        if args.command == "explain":
            from agent.explain.command import explain

            return explain(args)
        flags = vars(args)
    try:
        config = from_sources(flags, os.environ)
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from agent.run.command import run
    from agent.run.logs import configure_logging

    configure_logging(config.log_level, config.log_format, node_name=config.node_name)

    try:
        return run(config)
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
