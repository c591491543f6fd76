"""The running agent's wiring: sources -> queue -> handler -> state -> exporters, put together once."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from agent import __version__
from agent.config import Config, ConfigError

if TYPE_CHECKING:  # imported where used, at run time: a replay never loads the Kubernetes source
    from agent.source.kube import KubeApi
    from agent.source.server_version import ServerVersionSource

__all__ = ["Agent", "SHUTDOWN_SECONDS", "FINAL_EXPORT_SECONDS"]

log = logging.getLogger("agent")

# One deadline for the whole shutdown, well inside the pod's terminationGracePeriodSeconds (30 s) and the
# promised 10 s: the loops get a second to stop, the final export what its own limit allows, the debug
# endpoint the rest. Threads still blocked past it (a LIST or watch on a hung API server, which no socket
# shutdown reaches before its headers arrive) are daemons and end with the process.
SHUTDOWN_SECONDS = 8.0
LOOPS_SECONDS = 1.0
FINAL_EXPORT_SECONDS = 5.0


class Agent:
    """The wired pipeline: sources -> queue -> handler -> state -> exporters."""

    def __init__(self, config: Config) -> None:
        from agent.export.otlp.provider import build_telemetry
        from agent.pipeline.handler import Handler
        from agent.pipeline.queue import EventQueue
        from agent.pipeline.state import NodeState
        from agent.telemetry.stats import RuntimeStats

        self.config = config
        self.stats = RuntimeStats()
        self.state = NodeState(config.node_name, autoscaler=config.autoscaler, max_pdbs=config.max_pdbs,
                               verdict_off=config.verdict_off)
        self.queue = EventQueue(metrics=self.stats)
        self.stop_event = threading.Event()
        self.api: KubeApi | None = None
        self.version_source: ServerVersionSource | None = None
        self.finished: threading.Event | None = None
        sources = self._kubernetes_sources() if not config.replay else [self._replay_source(config.replay)]
        self.source = sources[0]
        self.host_usage = self._host_usage_source()
        if self.host_usage is not None:
            sources.append(self.host_usage)
        self.handler = Handler(state=self.state, metrics=self.stats, kubernetes=self._kubernetes_info())
        self.telemetry = build_telemetry(self.state, self.stats, config.exporter, config.otlp,
                                         interval=float("inf") if config.once else config.export_interval,
                                         timeout=config.export_timeout, service_version=__version__,
                                         resource_attributes=config.resource_attributes)
        self.debug = self._debug_server()
        self._threads = [
            *(threading.Thread(target=s.run, args=(self.stop_event,), name=f"source-{i}", daemon=True)
              for i, s in enumerate(sources)),
            threading.Thread(target=self.handler.run, args=(self.queue, self.stop_event), name="handler", daemon=True),
        ]
        if self.telemetry.reader is not None and not config.once:
            self._threads.append(threading.Thread(target=self._first_export, args=(self.stop_event,),
                                                  name="first-export", daemon=True))

    def _first_export(self, stop: threading.Event) -> None:
        """One export as soon as the pods and the Node are read, then the SDK's schedule: its reader first exports an
        interval after start, which on a node that just joined is the longest wait before its first number."""
        while not stop.is_set():
            if self.state.wait_listed(0.5):
                if not stop.is_set():
                    self.telemetry.flush()
                return

    def _replay_source(self, replay: str):
        from agent.source.documents import DumpError
        from agent.source.replay import ReplaySource, load_capture

        try:
            source = ReplaySource(text=load_capture(replay), node_name=self.config.node_name,
                                  emit=self.queue.put, metrics=self.stats, max_pdbs=self.config.max_pdbs)
        except DumpError as exc:
            where = "from standard input" if replay == "-" else repr(replay)
            raise ConfigError(f"cannot read capture {where}: {exc}") from None
        self.finished = source.finished
        return source

    def _kubernetes_sources(self) -> list:
        """One reflector for this node's pods, one for its Node object, one for the cluster's PDBs (unless off)."""
        from agent.source.kube import KubeApi, KubeConfigError, load_configuration
        from agent.source.reflector import NodeObject, PdbsOfCluster, PodsOfNode, Reflector, ReflectorSettings

        config = self.config
        if config.cluster is None:
            raise ConfigError("no cluster to watch: the configuration has neither cluster access nor --replay")
        try:
            api = self.api = KubeApi(load_configuration(config.cluster))
        except KubeConfigError as exc:
            raise ConfigError(f"{exc}; pass --kubeconfig FILE, or try the agent without a cluster: --replay "
                              "sample") from None
        settings = ReflectorSettings(read_timeout=config.read_timeout, min_watch_timeout=config.watch_timeout[0],
                                     max_watch_timeout=config.watch_timeout[1])
        version = None
        if config.kubernetes_version is None:
            from agent.source.server_version import ServerVersionSource

            version = self.version_source = ServerVersionSource(api=api, emit=self.queue.put, metrics=self.stats)
        pods = Reflector(api=api, watched=PodsOfNode(node_name=config.node_name), emit=self.queue.put,
                         metrics=self.stats, settings=settings,
                         on_list=version.relisted if version is not None else None)
        node = Reflector(api=api, watched=NodeObject(node_name=config.node_name), emit=self.queue.put,
                         metrics=self.stats, settings=settings)
        pdbs = [Reflector(api=api, watched=PdbsOfCluster(limit=config.max_pdbs), emit=self.queue.put,
                          metrics=self.stats, settings=settings)] if config.watch_pdbs else []
        return [pods, node, *pdbs] + ([version] if version is not None else [])

    def _kubernetes_info(self):
        """The rules in force at start: --kubernetes-version, else the newest until the API server's version is read."""
        from agent.model.rules import rules_for
        from agent.pipeline.state import DEFAULT_KUBERNETES, KubernetesInfo

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
        return HostUsageSource(sampler=UsageSampler(on_error=self.stats.usage_error), emit=self.queue.put,
                               interval=self.config.export_interval)

    def _debug_server(self):
        config = self.config
        if config.debug_address is None:
            return None
        from agent.debug.endpoint import DebugServer
        from agent.telemetry.health import HealthLimits

        periodic_export = not (config.once or config.exporter == "none")
        limits = HealthLimits.for_config(config.read_timeout, config.export_interval if periodic_export else None,
                                         config.export_timeout)
        try:
            return DebugServer(config.debug_address, self.state, self.stats, limits, views=config.debug_views,
                               hosts=config.debug_hosts)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot serve the debug endpoint on {config.debug_address} (the liveness and readiness "
                              f"probes depend on it): {exc}; free the port or pass another --debug-address") from None

    def start(self) -> Agent:
        for t in self._threads:
            t.start()
        if self.debug is not None:
            self.debug.start()
        log.info("node-requests-agent %s watching node %s (exporter %s)", __version__, self.config.node_name,
                 self.config.exporter)
        return self

    @property
    def running_loops(self) -> list[str]:
        """The names of the agent's loops (sources, handler, first export) still running: after a shutdown, the
        ones it did not wait for (blocked on the network)."""
        return [t.name for t in self._threads if t.is_alive()]

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until a replay is fully handled (or ``timeout``)."""
        if self.finished is not None and not self.finished.wait(timeout):
            return False
        return self.queue.join(timeout)

    def shutdown(self, final_export: bool = True, seconds: float = SHUTDOWN_SECONDS) -> float:
        """Stop everything within one deadline, ``seconds`` from now, with one final export; the seconds taken.

        Everything is told to stop first, at once (the stop event, the watches' sockets), so nothing waits
        for another part's timeout; each wait after that gets what remains of the one deadline.
        """
        started = time.monotonic()
        deadline = started + seconds

        def remaining(reserve: float = 0.0) -> float:
            return max(0.0, deadline - reserve - time.monotonic())

        self.stop_event.set()
        # Idle loops wait without polling; tell each to look at the stop event now.
        self.queue.wake()
        if self.version_source is not None:
            self.version_source.interrupt()
        if self.api is not None:
            self.api.interrupt()  # a watch blocked in a read would otherwise hold shutdown for its read timeout
        loops_until = time.monotonic() + min(LOOPS_SECONDS, remaining())
        for t in self._threads:
            t.join(max(0.0, loops_until - time.monotonic()))
        stuck = self.running_loops
        if stuck:
            log.info("not waiting for %s (blocked on the network); they end with the process", ", ".join(stuck))
        # The debug endpoint answers probes until the final export is done; it keeps a second for itself.
        self.telemetry.shutdown(final_export=final_export,
                                timeout=min(FINAL_EXPORT_SECONDS, remaining(reserve=1.0)))
        if self.debug is not None:
            self.debug.stop(timeout=remaining())
        if self.api is not None:
            self.api.close()
        return time.monotonic() - started
