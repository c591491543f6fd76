"""The suite's fixtures, registered once: each lives with the support module it serves."""

pytest_plugins = [
    "testkit.cluster",  # cluster (first: the other plugins import it, and it must be rewritten before)
    "testkit.agents",  # apiserver, make_agent
    "testkit.victoriametrics",  # victoriametrics
    "testkit.kwok",  # kwok
    "testkit.kubelet",  # deployed
    "testkit.trust",  # trust_cluster
    "testkit.node_cluster",  # node_cluster
    "testkit.node_rollout",  # prometheus, rollout (on node_cluster)
    "testkit.otlp_receiver",  # http_receiver, module_http_receiver, grpc_receiver
]
