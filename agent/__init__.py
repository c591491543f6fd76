"""node-requests-agent: what each pod on this node costs the cluster-autoscaler.

Data flows one way: Kubernetes source (``agent.source``) -> event queue
(``agent.queue``) -> handler (``agent.handler``) -> node state
(``agent.state``) -> exporters (``agent.export``). The numbers themselves are
pure functions: ``agent.quantity``, ``agent.requests``, ``agent.neon`` and
``agent.valuation``. Wiring happens in ``agent.cli`` only.
"""

__version__ = "0.1.0"
