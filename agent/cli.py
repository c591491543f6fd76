"""Command line and wiring: the one place where the parts are put together."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from agent import __version__
from agent.config import EXPORTERS, Config, ConfigError, from_sources, kubernetes_version
from agent.model.rules import NEWEST

log = logging.getLogger("agent")

EXIT_CONFIG = 2
EXIT_FAILED = 1


COMMANDS = ("run", "explain")


def _prog() -> str:
    """``kubectl node-requests`` when run as the kubectl plugin (kubectl execs ``kubectl-node_requests``)."""
    return "kubectl node-requests" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "node-requests-agent"


def _parser(prog: str = "node-requests-agent") -> argparse.ArgumentParser:
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
    run.add_argument("--procfs", metavar="PATH",
                     help="the /proc to read the used series from (env HOST_PROC; default /proc, whose stat and meminfo "
                          "are host-wide inside a container; 'off')")
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (env LOG_LEVEL; default INFO)")
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
    args = _parser(prog).parse_args(argv)
    if args.command == "explain":
        return _explain(args)
    try:
        config = from_sources(vars(args), os.environ)
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(config)
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG


class _Failed(Exception):
    def __init__(self, message: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(message)
        self.code = code


def _explain(args: argparse.Namespace) -> int:
    import shutil

    from agent.explain import explain_json, explain_view, nodes_only, pods_dump, rules_line
    from agent.export.cluster_table import cluster_table
    from agent.export.columns import clip
    from agent.model.cluster import pod_filter
    from agent.model.rules import rules_for
    from agent.source.documents import DumpError, read_documents
    from agent.source.replay import load_capture

    from_server = False
    try:
        version = kubernetes_version(args.kubernetes_version)
        if args.live:
            if args.file != "-" or args.node_file:
                raise _Failed("--live reads the cluster: give no input file or --node-file")
            from_server = version is None
            pods, nodes, skipped, server_version = _list_live(args, ask_version=from_server)
            version = version or server_version
        else:
            if args.kubeconfig or args.context:
                raise _Failed("--kubeconfig and --context read the cluster: add --live")
            documents = read_documents(load_capture(args.file))
            where = "standard input" if args.file == "-" else args.file
            dump = pods_dump(documents, where)
            pods, nodes, skipped = dump.pods, dump.nodes, dump.skipped
            if args.node_file is not None:
                with open(args.node_file, encoding="utf-8") as f:
                    nodes = nodes + nodes_only(read_documents(f.read()), args.node_file)
        rules, warning = (NEWEST, None) if version is None else rules_for(version)
        view = explain_view(pods, nodes, rules, args.node, args.sort)
    except (OSError, UnicodeDecodeError, DumpError, _Failed, ConfigError) as exc:
        print(f"node-requests-agent explain: {exc}", file=sys.stderr)
        return getattr(exc, "code", EXIT_CONFIG)
    for reason in skipped:
        print(f"node-requests-agent explain: skipped an object: {reason}", file=sys.stderr)
    if warning:
        print(f"node-requests-agent explain: {warning}", file=sys.stderr)
    shown = pod_filter(args.namespace, args.source, args.problems)
    if args.output == "json":
        print(explain_json(view, rules, shown))
    else:
        width = shutil.get_terminal_size((120, 24)).columns
        print(clip(rules_line(rules, version, from_server), None if args.output == "wide" else width))
        print(cluster_table(view, shown, width=width, wide=args.output == "wide"))
    return 0


def _list_live(args: argparse.Namespace, ask_version: bool = False):
    """One LIST of pods and one of Nodes through the agent's own source code; the API server's version if asked."""
    from agent.model.rules import VersionError
    from agent.source.cluster_list import list_cluster
    from agent.source.kube import TRANSPORT_ERRORS, ApiError, KubeApi, KubeConfigError, load_configuration
    from agent.source.server_version import read_server_version

    try:
        api = KubeApi(load_configuration(args.kubeconfig, args.context))
    except KubeConfigError as exc:
        raise _Failed(f"{exc}; pass --kubeconfig FILE (or --context), or explain a dump: "
                      "kubectl get nodes,pods -A -o json | node-requests-agent explain") from None
    try:
        pods, nodes, skipped = list_cluster(api, args.node)
        version = None
        if ask_version:
            try:
                version = read_server_version(api)
            except (ApiError, *TRANSPORT_ERRORS, VersionError) as exc:
                print(f"node-requests-agent explain: cannot read the API server's version ({exc}); using the {NEWEST} "
                      "rules", file=sys.stderr)
        return pods, nodes, skipped, version
    except (ApiError, *TRANSPORT_ERRORS, ValueError) as exc:
        raise _Failed(f"cannot list pods and nodes from the cluster: {exc}", EXIT_FAILED) from None
    finally:
        api.close()


class Agent:
    """The wired pipeline: sources -> queue -> handler -> state -> exporters."""

    def __init__(self, config: Config) -> None:
        from agent.export.otlp import otlp_settings
        from agent.export.provider import build_telemetry
        from agent.pipeline.handler import Handler
        from agent.pipeline.queue import EventQueue
        from agent.pipeline.state import NodeState
        from agent.pipeline.stats import RuntimeStats

        self.config = config
        self.stats = RuntimeStats()
        self.state = NodeState(config.node_name)
        self.queue = EventQueue(self.stats)
        self.stop_event = threading.Event()
        self.api = None
        self.finished: threading.Event | None = None
        sources = self._kubernetes_sources() if not config.replay else [self._replay_source()]
        self.source = sources[0]
        self.host_usage = self._host_usage_source()
        if self.host_usage is not None:
            sources.append(self.host_usage)
        self.handler = Handler(self.state, self.stats, self._kubernetes_info())
        otlp = config.otlp
        if config.exporter == "otlp" and otlp is None:  # a Config built in code rather than from_sources()
            try:
                otlp = otlp_settings(os.environ, config.otlp_protocol)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.telemetry = build_telemetry(self.state, self.stats, config.exporter, otlp,
                                         interval=float("inf") if config.once else config.export_interval,
                                         timeout=config.export_timeout, service_version=__version__)
        self.debug = self._debug_server()
        self._threads = [
            *(threading.Thread(target=s.run, args=(self.stop_event,), name=f"source-{i}", daemon=True)
              for i, s in enumerate(sources)),
            threading.Thread(target=self.handler.run, args=(self.queue, self.stop_event), name="handler", daemon=True),
        ]

    def _replay_source(self):
        from agent.source.documents import DumpError
        from agent.source.replay import ReplaySource, load_capture

        try:
            source = ReplaySource(load_capture(self.config.replay), self.config.node_name, self.queue, self.stats)
        except (OSError, UnicodeDecodeError, DumpError) as exc:
            raise ConfigError(f"cannot read capture {self.config.replay!r}: {exc}") from None
        self.finished = source.finished
        return source

    def _kubernetes_sources(self) -> list:
        """One reflector for this node's pods, one for its Node object."""
        from agent.source.kube import KubeApi, KubeConfigError, load_configuration
        from agent.source.reflector import Reflector, ReflectorSettings, node_object, pods_of_node

        config = self.config
        try:
            self.api = KubeApi(load_configuration(config.kubeconfig, config.context))
        except KubeConfigError as exc:
            raise ConfigError(f"{exc}; pass --kubeconfig FILE, or try the agent without a cluster: --replay sample") from None
        settings = ReflectorSettings(read_timeout=config.read_timeout, min_watch_timeout=config.watch_timeout[0],
                                     max_watch_timeout=config.watch_timeout[1])
        version = None
        if config.kubernetes_version is None:
            from agent.source.server_version import ServerVersionSource

            version = ServerVersionSource(self.api, self.queue, self.stats)
        pods = Reflector(self.api, pods_of_node(config.node_name), self.queue, self.stats, settings,
                         on_list=version.relisted if version is not None else None)
        node = Reflector(self.api, node_object(config.node_name), self.queue, self.stats, settings)
        return [pods, node] + ([version] if version is not None else [])

    def _kubernetes_info(self):
        """The rules in force at start: --kubernetes-version, else the newest until the API server's version is read."""
        from agent.pipeline.state import DEFAULT_KUBERNETES, KubernetesInfo
        from agent.model.rules import rules_for

        version = self.config.kubernetes_version
        if version is None:
            if self.config.replay:
                log.info("replay: pod requests follow the Kubernetes %s rules (the newest supported; "
                         "--kubernetes-version chooses another)", DEFAULT_KUBERNETES.rules)
            return DEFAULT_KUBERNETES
        rules, warning = rules_for(version)
        if warning:
            log.warning("%s", warning)
        log.info("--kubernetes-version %s: pod requests follow the Kubernetes %s rules", version, rules)
        return KubernetesInfo(rules, "", "flag", warning)

    def _host_usage_source(self):
        if not self.config.procfs:
            return None
        from agent.source.host_usage import HostUsageSource, UsageSampler, set_procfs

        set_procfs(self.config.procfs)
        return HostUsageSource(UsageSampler(on_error=self.stats.usage_error), self.queue, self.config.export_interval)

    def _debug_server(self):
        config = self.config
        if not config.debug_address:
            return None
        from agent.export.debug import DebugServer
        from agent.pipeline.health import HealthLimits

        periodic_export = not (config.once or config.exporter == "none")
        limits = HealthLimits.for_config(config.read_timeout, config.export_interval if periodic_export else None,
                                         config.export_timeout)
        try:
            return DebugServer(config.debug_address, self.state, self.stats, limits)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot serve the debug endpoint on {config.debug_address} (the liveness and readiness "
                              f"probes depend on it): {exc}; free the port or pass another --debug-address") from None

    def start(self) -> "Agent":
        for t in self._threads:
            t.start()
        if self.debug is not None:
            self.debug.start()
        log.info("node-requests-agent %s watching node %s (exporter %s)", __version__, self.config.node_name,
                 self.config.exporter)
        return self

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until a replay is fully handled (or ``timeout``)."""
        if self.finished is not None and not self.finished.wait(timeout):
            return False
        return self.queue.join(timeout)

    def shutdown(self, final_export: bool = True) -> None:
        """Stop the source and handler, then export the final state once."""
        self.stop_event.set()
        if self.api is not None:
            self.api.interrupt()  # a watch blocked in a read would otherwise hold shutdown for its read timeout
        for t in self._threads:
            t.join(timeout=5)
        self.telemetry.shutdown(final_export=final_export)
        if self.debug is not None:
            self.debug.stop()
        if self.api is not None:
            self.api.close()


def _install_signal_handlers(agent: Agent) -> None:
    """TERM and INT: final export, exit 0. QUIT: the same, after dumping every thread's stack (a daemon's
    "what are you doing?"). HUP: nothing to reload, so it is logged and ignored rather than killing the agent."""

    def stop(signum, frame):
        log.info("received %s; exporting once more and exiting", signal.Signals(signum).name)
        agent.stop_event.set()

    def quit_with_stacks(signum, frame):
        try:
            faulthandler.dump_traceback(all_threads=True)
        except (OSError, ValueError):  # stderr closed
            pass
        stop(signum, frame)

    def ignore(signum, frame):
        log.info("received SIGHUP; nothing to reload (configuration comes from flags and environment), ignoring it")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGQUIT, quit_with_stacks)
    signal.signal(signal.SIGHUP, ignore)


def run(config: Config) -> int:
    # A closed stdout or stderr must not turn every log line into a traceback on the other stream.
    logging.raiseExceptions = False
    agent = Agent(config)
    _install_signal_handlers(agent)
    agent.start()
    if config.once:
        if agent.host_usage is not None:
            agent.host_usage.sample_now()  # a CPU delta since start, so the one export has a used cpu
        agent.drain()
        if config.exporter == "table":  # the demo: a person reads this first, then the metric lines
            from agent.export.cluster_table import agent_summary

            print(agent_summary(agent.state.snapshot()) + "\n", flush=True)
        agent.telemetry.flush()
        agent.shutdown(final_export=False)
        return 0
    while not agent.stop_event.wait(1.0):
        pass
    agent.shutdown()
    return 0
