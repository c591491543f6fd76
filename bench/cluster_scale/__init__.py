"""Cluster scale by simulation: 1,000 KWOK nodes x 30 pods on one real API server, 50 agents, one real Collector.

Run: ``python bench/run.py cluster-scale`` after the test command's install;
the control plane, KWOK, the Collector, Prometheus 3 and the client-go anchor are built into the component cache on
first use. ``NRA_SCALE_QUICK=1`` runs a small size (20 nodes, 10 agents, short windows) to check the setup.

What runs: etcd, kube-apiserver, kube-scheduler and kube-controller-manager 1.37.2 (testkit/trust.py: the
shipped authorization configuration, the API server as the ServiceAccount issuer), KWOK's controller managing the
nodes (testkit/kwok.py), the shipped DaemonSet applied with kubectl, and one agent process per measured node
started from its DaemonSet pod as the kubelet would start it (testkit/kubelet.py; no container runs on a KWOK
node). The agents push OTLP to one Collector running the shipped otel-config/collector.yaml (token verified against
the API server, nodeidentity, remote write) into Prometheus 3. The scheduler's and controller-manager's client QPS
are raised (``NRA_SCALE_CLIENT_QPS``) so the population is limited by the machine, not by their rate limiters.

Phases: population (pods created unbound, bound by the real scheduler, set Running by KWOK); a wait until the API
server's CPU is steady; a window without agents; cold start of every agent at once; a steady window; the agents
stopped for a second window without them (the two bracket the steady one, so drift is not counted as the agents');
a second cold start; an API server restart with every agent connected; churn (pods created on and deleted from the
nodes at a fixed rate by several writer processes, each timed from its API write to Prometheus); the same API
server restart with client-go's informers (bench/reflector_anchor/) in the agents' place;
and the 5,000-node arithmetic from the measured slopes. docs/benchmarks.md explains each figure.

Environment (defaults are the issue's sizes): NRA_SCALE_NODES (1000), NRA_SCALE_PODS (30 per node, the DaemonSet's
pod included), NRA_SCALE_AGENTS (50), NRA_SCALE_STEADY_SECONDS (660: longer than the longest server-side watch
timeout, 600 s), NRA_SCALE_DOWN_SECONDS (5), NRA_SCALE_CHURN_RATE (100 creations/s, as many deletions),
NRA_SCALE_CHURN_SECONDS (120), NRA_SCALE_CHURN_LIFETIME (45 s), NRA_SCALE_CHURN_WORKERS (4 writer processes),
NRA_SCALE_CHURN_KWOK (0: KWOK leaves the churn pods alone, so each is one create and one delete; 1: KWOK sets them
Running, one more write each),
NRA_SCALE_BASELINE_SECONDS (180, each no-agent window), NRA_SCALE_SETTLE_LIMIT (600 s), NRA_SCALE_CLIENT_QPS (300),
NRA_SCALE_ANCHOR (1).

Layout: ``run.main()`` lists the phases; ``population``, ``windows`` (settling, the windows, cold starts, the
agents' share), ``restart``, ``churn`` and ``anchor`` hold their mechanics, ``results`` what each measured, and
``report`` prints the table. ``sizes`` reads the environment.
"""

