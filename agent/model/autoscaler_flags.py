"""Every flag the cluster-autoscaler's binary accepts, by name, with the kind of value it takes: what the agent needs
to read the autoscaler's whole args list as the autoscaler reads it (a boolean never takes the next word) and to tell
one of its flags from a typo.

Extracted from the autoscaler's own source, not written from memory; tests/test_config_autoscaler.py re-extracts it
from the source when it is at hand (``../shared/autoscaler/``, components.autoscaler.source_folder(), and Go's module
cache) and fails when this table is stale:

- CLUSTER_AUTOSCALER: cluster-autoscaler 1.36.1 ``config/flags/flags.go`` (the name of ``--scheduler-config-file``
  from ``config/const.go``), and 1.31.1 ``main.go`` for the five flags removed since (neon's patch adds none);
- KLOG: k8s.io/klog/v2 v2.140.0 ``klog.go``, registered by ``klog.InitFlags`` in the autoscaler's ``main.go`` (1.36.1's
  go.mod; 1.31.1 uses v2.130.1), names as klog spells them: pflag's normalization makes ``_`` and ``-`` alike;
- COMPONENT_BASE: k8s.io/component-base v0.36.2 (1.36.1's go.mod), which ``main.go`` asks for the leader-election
  flags (``config/options/leaderelectionconfig.go``), the logging flags (``logs/api/v1/options.go``) and
  ``--feature-gates`` (``featuregate/feature_gate.go``).

The kinds are the Go flag types: BOOL (``flag.Bool``), DURATION (``time.ParseDuration``), FLOAT
(``strconv.ParseFloat``), INT and UINT (``strconv.ParseInt``/``ParseUint`` with base 0), TEXT (strings, lists and
every other ``flag.Var``).
Cloud providers other than kwok are trimmed from the archive beside the clone; their flags registered outside
``flags.go`` (if any) are not here.
"""

from __future__ import annotations

__all__ = ["BOOL", "CLUSTER_AUTOSCALER", "COMPONENT_BASE", "DURATION", "FLOAT", "INT", "KLOG", "TEXT", "UINT"]

BOOL, DURATION, FLOAT, INT, UINT, TEXT = "bool", "duration", "float", "int", "uint", "text"

CLUSTER_AUTOSCALER: dict[str, str] = {
    "address": TEXT, "allowed-scheduler-names": TEXT, "async-node-groups": BOOL, "aws-use-static-instance-list": BOOL,
    "balance-similar-node-groups": BOOL, "balancing-ignore-label": TEXT, "balancing-label": TEXT,
    "blocking-system-pod-distruption-timeout": DURATION, "bulk-mig-instances-listing-enabled": BOOL,
    "bypassed-scheduler-names": TEXT, "capacity-buffer-controller-enabled": BOOL,
    "capacity-buffer-pod-dry-run-enabled": BOOL, "capacity-buffer-pod-injection-enabled": BOOL,
    "capacity-quotas-enabled": BOOL, "check-capacity-batch-processing": BOOL,
    "check-capacity-processor-instance": TEXT, "check-capacity-provisioning-request-batch-timebox": DURATION,
    "check-capacity-provisioning-request-max-batch-size": INT, "cloud-config": TEXT, "cloud-provider": TEXT,
    "cluster-name": TEXT, "cluster-snapshot-parallelism": INT, "clusterapi-cloud-config-authoritative": BOOL,
    "cordon-node-before-terminating": BOOL, "cores-total": TEXT, "daemonset-eviction-for-empty-nodes": BOOL,
    "daemonset-eviction-for-occupied-nodes": BOOL, "debugging-snapshot-enabled": BOOL, "drain-priority-config": TEXT,
    "dynamic-node-delete-delay-after-taint-enabled": BOOL, "emit-per-nodegroup-metrics": BOOL,
    "enable-csi-node-aware-scheduling": BOOL, "enable-dynamic-resource-allocation": BOOL,
    "enable-proactive-scaleup": BOOL, "enable-provisioning-requests": BOOL, "enforce-node-group-min-size": BOOL,
    "estimator": TEXT, "expander": TEXT, "expendable-pods-priority-cutoff": INT, "fastpath-binpacking-enabled": BOOL,
    "force-delete-failed-nodes": BOOL, "force-delete-unregistered-nodes": BOOL, "force-ds": BOOL,
    "frequent-loops-enabled": BOOL, "gce-concurrent-refreshes": INT, "gce-expander-ephemeral-storage-support": BOOL,
    "gce-mig-instances-min-refresh-wait-time": DURATION, "gpu-total": TEXT, "grpc-expander-cert": TEXT,
    "grpc-expander-url": TEXT, "ignore-daemonsets-utilization": BOOL, "ignore-mirror-pods-utilization": BOOL,
    "ignore-taint": TEXT, "initial-node-group-backoff-duration": DURATION, "kube-api-content-type": TEXT,
    "kube-client-burst": INT, "kube-client-qps": FLOAT, "kubeconfig": TEXT, "kubernetes": TEXT,
    "max-allocatable-difference-ratio": FLOAT, "max-autoprovisioned-node-group-count": INT,
    "max-binpacking-time": DURATION, "max-bulk-soft-taint-count": INT, "max-bulk-soft-taint-time": DURATION,
    "max-drain-parallelism": INT, "max-empty-bulk-delete": INT, "max-failing-time": DURATION,
    "max-free-difference-ratio": FLOAT, "max-graceful-termination-sec": INT, "max-inactivity": DURATION,
    "max-node-group-backoff-duration": DURATION, "max-node-provision-time": DURATION,
    "max-node-skip-eval-time-tracker-enabled": BOOL, "max-node-startup-time": DURATION,
    "max-nodegroup-binpacking-duration": DURATION, "max-nodes-per-scaleup": INT, "max-nodes-total": INT,
    "max-pod-eviction-time": DURATION, "max-scale-down-parallelism": INT, "max-startup-time": DURATION,
    "max-total-unready-percentage": FLOAT, "memory-difference-ratio": FLOAT, "memory-total": TEXT,
    "min-replica-count": INT, "namespace": TEXT, "new-pod-scale-up-delay": DURATION,
    "node-autoprovisioning-enabled": BOOL, "node-delete-delay-after-taint": DURATION,
    "node-deletion-batcher-interval": DURATION, "node-deletion-candidate-ttl": DURATION,
    "node-deletion-delay-timeout": DURATION, "node-group-auto-discovery": TEXT,
    "node-group-backoff-reset-timeout": DURATION, "node-info-cache-expire-time": DURATION,
    "node-removal-latency-tracking-enabled": BOOL, "nodes": TEXT, "ok-total-unready-count": INT,
    "parallel-drain": BOOL, "parallel-scale-up": BOOL, "pod-injection-limit": INT, "predicate-parallelism": INT,
    "profiling": BOOL, "provisioning-request-initial-backoff-time": DURATION,
    "provisioning-request-max-backoff-cache-size": INT, "provisioning-request-max-backoff-time": DURATION,
    "record-duplicated-events": BOOL, "regional": BOOL, "salvo-scale-up": BOOL, "salvo-scale-up-budget": DURATION,
    "scale-down-candidates-pool-min-count": INT, "scale-down-candidates-pool-ratio": FLOAT,
    "scale-down-delay-after-add": DURATION, "scale-down-delay-after-delete": DURATION,
    "scale-down-delay-after-failure": DURATION, "scale-down-delay-type-local": BOOL, "scale-down-enabled": BOOL,
    "scale-down-gpu-utilization-threshold": FLOAT, "scale-down-non-empty-candidates-count": INT,
    "scale-down-simulation-timeout": DURATION, "scale-down-unneeded-time": DURATION,
    "scale-down-unready-enabled": BOOL, "scale-down-unready-time": DURATION,
    "scale-down-utilization-threshold": FLOAT, "scale-from-unschedulable": BOOL, "scale-up-from-zero": BOOL,
    "scaleup-simulation-for-skipped-node-groups-enabled": BOOL, "scan-interval": DURATION,
    "scheduler-config-file": TEXT, "skip-nodes-with-custom-controller-pods": BOOL,
    "skip-nodes-with-local-storage": BOOL, "skip-nodes-with-system-pods": BOOL, "startup-taint": TEXT,
    "startup-taint-prefix": TEXT, "status-config-map-name": TEXT, "status-taint": TEXT,
    "unremovable-node-recheck-timeout": DURATION, "user-agent": TEXT, "write-status-configmap": BOOL,
}

KLOG: dict[str, str] = {
    "add_dir_header": BOOL, "alsologtostderr": BOOL, "alsologtostderrthreshold": TEXT,
    "legacy_stderr_threshold_behavior": BOOL, "log_backtrace_at": TEXT, "log_dir": TEXT, "log_file": TEXT,
    "log_file_max_size": UINT, "logtostderr": BOOL, "one_output": BOOL, "skip_headers": BOOL,
    "skip_log_headers": BOOL, "stderrthreshold": TEXT, "v": TEXT, "vmodule": TEXT,
}

COMPONENT_BASE: dict[str, str] = {
    "feature-gates": TEXT, "leader-elect": BOOL, "leader-elect-lease-duration": DURATION,
    "leader-elect-renew-deadline": DURATION, "leader-elect-resource-lock": TEXT, "leader-elect-resource-name": TEXT,
    "leader-elect-resource-namespace": TEXT, "leader-elect-retry-period": DURATION, "log-flush-frequency": DURATION,
    "log-json-info-buffer-size": TEXT, "log-json-split-stream": BOOL, "log-text-info-buffer-size": TEXT,
    "log-text-split-stream": BOOL, "logging-format": TEXT, "v": TEXT, "vmodule": TEXT,
}
