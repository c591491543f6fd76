package main

// The calls whose signatures changed between the releases, as cluster-autoscaler 1.31 has them (read at 1.31.1, the
// base of neon's patched build): NodeInfo is the scheduler framework's, Calculate has no DRA flag, the GPU config names
// its ResourceName, and the system-pod rule has no timeout (1.31 has no --blocking-system-pod-distruption-timeout:
// the flag is read and ignored here, so one request can go to both releases).

import (
	"flag"
	"time"

	apiv1 "k8s.io/api/core/v1"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/config"
	simoptions "k8s.io/autoscaler/cluster-autoscaler/simulator/options"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/utilization"
)

type nodeInfo = schedulerframework.NodeInfo

func registerReleaseFlags(fs *flag.FlagSet, o *options) {
	fs.DurationVar(&o.bspDisruptionTimeout, "blocking-system-pod-distruption-timeout", time.Hour, "not in 1.31: ignored")
}

func deleteOptions(o *options) simoptions.NodeDeleteOptions {
	return simoptions.NewNodeDeleteOptions(config.AutoscalingOptions{
		SkipNodesWithSystemPods:           o.skipSystemPods,
		SkipNodesWithLocalStorage:         o.skipLocalStorage,
		SkipNodesWithCustomControllerPods: o.skipCustomControllerPods,
		MinReplicaCount:                   o.minReplicaCount,
	})
}

// newNodeInfo is what the 1.31 snapshot holds for the node (schedulerframework.NewNodeInfo(pods...) then SetNode, as
// its tests and its delta snapshot build it).
func newNodeInfo(node *apiv1.Node, pods []*apiv1.Pod) *nodeInfo {
	ni := schedulerframework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

func calculate(ni *nodeInfo, o *options, gpuConfig *cloudprovider.GpuConfig, now time.Time) (utilization.Info, error) {
	return utilization.Calculate(ni, o.ignoreDaemonSets, o.ignoreMirrorPods, gpuConfig, now)
}

func gpuResource(c *cloudprovider.GpuConfig) string { return string(c.ResourceName) }

// atOrBelowThreshold reproduces the comparison of 1.31.1's unexported isNodeAtOrBelowUtilizationThreshold (it needs a
// cloud provider's node groups and their config getter to be called): `if utilInfo.Utilization >= threshold {
// return false, nil }`: strictly below in 1.31.
func atOrBelowThreshold(utilization, threshold float64) bool {
	if utilization >= threshold {
		return false
	}
	return true
}
