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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="node-requests-agent",
        description="Per-node agent: exports what each pod costs the cluster-autoscaler "
                    "(NeonVM usage, else effective requests) as OpenTelemetry metrics.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{run,explain}")

    run = sub.add_parser("run", help="run the agent (the default command)",
                         description="Watch this node's pods and push their values over OTLP.")
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
                     help="the host's /proc for the used series (env HOST_PROC; default /host/proc if present, else /proc; 'off')")
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (env LOG_LEVEL; default INFO)")
    run.add_argument("--kubernetes-version", metavar="X.Y",
                     help="count requests with this Kubernetes release's rules (default: the API server's own version "
                          "from /version, re-read after every relist; the newest supported with --replay)")

    explain = sub.add_parser("explain", help="explain what the agent would export for a dump of pods",
                             description="Read a Pod, PodList, `kubectl get -o json` List or a watch capture "
                                         "(JSON or YAML) and print per pod what the agent exports and why.")
    explain.add_argument("file", nargs="?", default="-", help="input file, or - for standard input (default)")
    explain.add_argument("--output", "-o", choices=("table", "json"), default="table")
    explain.add_argument("--node-file", metavar="FILE",
                         help="a Node object (JSON or YAML) for the node comparisons; a Node inside the input works too")
    explain.add_argument("--kubernetes-version", metavar="X.Y",
                         help=f"count requests with this Kubernetes release's rules (default {NEWEST}, the newest supported)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "explain", "-h", "--help", "--version"):
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    if args.command == "explain":
        try:
            version = kubernetes_version(args.kubernetes_version)
        except ConfigError as exc:
            print(f"node-requests-agent explain: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        return _explain(args.file, args.output, args.node_file, version)
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


def _explain(path: str, output: str, node_file: str | None = None, version=None) -> int:
    from agent.source.documents import DumpError, read_documents
    from agent.explain import explain_json, explain_table, node_from_documents, records_from_documents
    from agent.model.rules import rules_for

    rules, warning = (NEWEST, None) if version is None else rules_for(version)
    if warning:
        print(f"node-requests-agent explain: {warning}", file=sys.stderr)

    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        documents = read_documents(text)
        records, skipped = records_from_documents(documents)
        if node_file is not None:
            with open(node_file, encoding="utf-8") as f:
                documents = read_documents(f.read())
        node = node_from_documents(documents, records)
    except (OSError, UnicodeDecodeError, DumpError) as exc:
        print(f"node-requests-agent explain: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for reason in skipped:
        print(f"node-requests-agent explain: skipped an object: {reason}", file=sys.stderr)
    print(explain_json(records, rules, node) if output == "json" else explain_table(records, rules, node))
    return 0


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
            raise ConfigError(str(exc)) from None
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
            raise ConfigError(f"cannot serve the debug endpoint on {config.debug_address}: {exc}") from None

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
        agent.telemetry.flush()
        agent.shutdown(final_export=False)
        return 0
    while not agent.stop_event.wait(1.0):
        pass
    agent.shutdown()
    return 0
