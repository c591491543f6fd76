"""node-requests-agent: what each pod on this node costs the cluster-autoscaler.

Data flows one way: Kubernetes source (``agent.source``) -> event queue
(``agent.pipeline.queue``) -> handler (``agent.pipeline.handler``) -> node state
(``agent.pipeline.state``) -> exporters (``agent.export``). The numbers themselves are
pure functions: ``agent.model.quantity``, ``agent.model.pod_requests``, ``agent.model.neon`` and
``agent.model.valuation``. Wiring happens in ``agent.cli`` only.
"""

__version__ = "0.1.0"

# Public API: the agent's own signals as plain numbers, without any metrics library.
from agent.pipeline.stats import HistogramSnapshot, RuntimeStats, StatsSnapshot  # noqa: E402

__all__ = ["__version__", "RuntimeStats", "StatsSnapshot", "HistogramSnapshot"]
