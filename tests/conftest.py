"""The suite's fixtures, registered once: each lives with the support module it serves."""

pytest_plugins = [
    "tests.support.cluster",  # cluster (first: the other plugins import it, and it must be rewritten before)
    "tests.support.agents",  # apiserver, make_agent
    "tests.support.victoriametrics",  # victoriametrics
    "tests.support.kwok",  # kwok
    "tests.support.kubelet",  # deployed
    "tests.support.trust",  # trust_cluster
    "tests.support.node_cluster",  # node_cluster
    "tests.support.node_rollout",  # prometheus, rollout (on node_cluster)
    "tests.support.otlp_receiver",  # http_receiver, module_http_receiver, grpc_receiver
]
