"""The suite's fixtures, registered once: each lives with the support module it serves."""

pytest_plugins = [
    "tests.support.agents",  # apiserver, make_agent
    "tests.support.victoriametrics",  # victoriametrics
    "tests.support.cluster",  # cluster
    "tests.support.kwok",  # kwok
    "tests.support.kubelet",  # deployed
    "tests.support.trust",  # trust_cluster
    "tests.support.node_cluster",  # node_cluster
    "tests.support.node_rollout",  # prometheus, rollout (on node_cluster)
]
