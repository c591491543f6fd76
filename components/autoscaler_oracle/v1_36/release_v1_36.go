package main

// The calls whose signatures changed between the releases, as cluster-autoscaler 1.33 and later have them (read at
// 1.36.1): the scheduler framework's NodeInfo moved into simulator/framework, Calculate takes draEnabled, the GPU
// config names its extended resource, and the system-pod rule has --blocking-system-pod-distruption-timeout.

import (
	"flag"
	"time"

	apiv1 "k8s.io/api/core/v1"

	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/config"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/framework"
	simoptions "k8s.io/autoscaler/cluster-autoscaler/simulator/options"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/utilization"
)

type nodeInfo = framework.NodeInfo

func registerReleaseFlags(fs *flag.FlagSet, o *options) {
	fs.DurationVar(&o.bspDisruptionTimeout, "blocking-system-pod-distruption-timeout", time.Hour, "")
}

func deleteOptions(o *options) simoptions.NodeDeleteOptions {
	return simoptions.NewNodeDeleteOptions(config.AutoscalingOptions{
		SkipNodesWithSystemPods:           o.skipSystemPods,
		SkipNodesWithLocalStorage:         o.skipLocalStorage,
		SkipNodesWithCustomControllerPods: o.skipCustomControllerPods,
		MinReplicaCount:                   o.minReplicaCount,
		BspDisruptionTimeout:              o.bspDisruptionTimeout,
	})
}

// newNodeInfo is what the snapshot holds for the node: its pods without DRA objects (framework.NewTestNodeInfo is
// NewNodeInfo(node, nil) plus AddPod(NewPodInfo(pod, nil)) per pod; the agent reads no DRA objects).
func newNodeInfo(node *apiv1.Node, pods []*apiv1.Pod) *nodeInfo {
	return framework.NewTestNodeInfo(node, pods...)
}

func calculate(ni *nodeInfo, o *options, gpuConfig *cloudprovider.GpuConfig, now time.Time) (utilization.Info, error) {
	return utilization.Calculate(ni, o.ignoreDaemonSets, o.ignoreMirrorPods, false, gpuConfig, now)
}

func gpuResource(c *cloudprovider.GpuConfig) string { return string(c.ExtendedResourceName) }

// atOrBelowThreshold is core/scaledown/eligibility's unexported isNodeAtOrBelowUtilizationThreshold, whose comparison
// cannot be called without a cloud provider's node groups and their config getter: it reproduces exactly its line
// `if utilInfo.Utilization > threshold { return false, nil }` (at 1.36.1).
func atOrBelowThreshold(utilization, threshold float64) bool {
	if utilization > threshold {
		return false
	}
	return true
}
