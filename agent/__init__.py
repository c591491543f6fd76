"""node-requests-agent: what each pod on this node costs the cluster-autoscaler.

Data flows one way, one folder a step: ``agent.source`` -> ``agent.pipeline``
(queue, handler, state) -> ``agent.export``. ``agent.model`` holds the pure
computation every step uses. Wiring happens in ``agent.cli`` only.
"""

__version__ = "0.1.0"

# Public API: the agent's own signals as plain numbers, without any metrics library.
from agent.pipeline.stats import HistogramSnapshot, RuntimeStats, StatsSnapshot  # noqa: E402

__all__ = ["__version__", "RuntimeStats", "StatsSnapshot", "HistogramSnapshot"]
