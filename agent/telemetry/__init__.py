"""The agent's own telemetry: what it counts about itself and how it judges its health.

Beside the data flow, not in it: the pipeline's stages report through the
interfaces pipeline/interfaces.py declares, ``RuntimeStats`` implements them,
and exporters, the debug endpoint and views read its immutable snapshot
through the one metric table. Also here: liveness and readiness (pure
functions of a snapshot) and the rate-limited warning log every loop uses.
"""
