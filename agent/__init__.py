"""node-requests-agent: what each pod on this node costs the cluster-autoscaler.

Data flows one way, one folder a step: ``agent.source`` (``agent.decode``
turns API objects into records) -> ``agent.pipeline`` (queue, handler, state)
-> ``agent.export`` (OTLP, Prometheus text). ``agent.model`` holds the pure
computation every step uses. Each command has its room (``agent.run``,
``agent.explain``, ``agent.debug``); ``agent.run`` alone wires the pipeline.
"""

__version__ = "0.1.0"

# Public API: the agent's own signals as plain numbers, without any metrics library.
from agent.telemetry.stats import HistogramSnapshot, RuntimeStats, StatsSnapshot

__all__ = ["__version__", "RuntimeStats", "StatsSnapshot", "HistogramSnapshot"]
