package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apiv1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	v1appslister "k8s.io/client-go/listers/apps/v1"
	v1batchlister "k8s.io/client-go/listers/batch/v1"
	v1lister "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/core/scaledown/eligibility"
	"k8s.io/autoscaler/cluster-autoscaler/core/scaledown/pdb"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/drainability"
	"k8s.io/autoscaler/cluster-autoscaler/simulator/drainability/rules"
	"k8s.io/autoscaler/cluster-autoscaler/utils/gpu"
	kube_util "k8s.io/autoscaler/cluster-autoscaler/utils/kubernetes"
)

// dump holds the objects of a kubectl-style List (or a bare array of objects) by kind; other kinds are ignored.
type dump struct {
	nodes                  []*apiv1.Node
	pods                   []*apiv1.Pod
	pdbs                   []*policyv1.PodDisruptionBudget
	replicaSets            []*appsv1.ReplicaSet
	statefulSets           []*appsv1.StatefulSet
	daemonSets             []*appsv1.DaemonSet
	jobs                   []*batchv1.Job
	replicationControllers []*apiv1.ReplicationController
}

func (d *dump) controllers() int {
	return len(d.replicaSets) + len(d.statefulSets) + len(d.daemonSets) + len(d.jobs) + len(d.replicationControllers)
}

func readDump(raw []byte) (*dump, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil && list.Items != nil {
		items = list.Items
	} else if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("dump: neither a List nor an array of objects: %w", err)
	}
	d := &dump{}
	for i, item := range items {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, fmt.Errorf("dump item %d: %w", i, err)
		}
		var err error
		switch head.Kind {
		case "Node":
			err = decodeInto(item, &d.nodes)
		case "Pod":
			err = decodeInto(item, &d.pods)
		case "PodDisruptionBudget":
			err = decodeInto(item, &d.pdbs)
		case "ReplicaSet":
			err = decodeInto(item, &d.replicaSets)
		case "StatefulSet":
			err = decodeInto(item, &d.statefulSets)
		case "DaemonSet":
			err = decodeInto(item, &d.daemonSets)
		case "Job":
			err = decodeInto(item, &d.jobs)
		case "ReplicationController":
			err = decodeInto(item, &d.replicationControllers)
		}
		if err != nil {
			return nil, fmt.Errorf("dump item %d (%s): %w", i, head.Kind, err)
		}
	}
	return d, nil
}

func decodeInto[T any](raw json.RawMessage, into *[]*T) error {
	obj := new(T)
	if err := json.Unmarshal(raw, obj); err != nil {
		return err
	}
	*into = append(*into, obj)
	return nil
}

func indexer[T any](objects []*T) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objects {
		_ = idx.Add(o)
	}
	return idx
}

// listPods fills the snapshot's pods as the running autoscaler does: kube_util.NewAllPodLister over a pod lister
// (an informer's indexer here), which drops Succeeded and Failed pods and, in neon's build, applies the patch's
// updatePodRequestsFromNeonVMAnnotation. A panic there is returned as an error.
func listPods(pods []*apiv1.Pod) (listed []*apiv1.Pod, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return kube_util.NewAllPodLister(v1lister.NewPodLister(indexer(pods))).List()
}

// listerRegistry holds the dump's controller objects; nil when the dump holds none (the agent in its pod watches no
// controllers: the rules that need listers then see none, as rules.Default's do with a nil Listers).
func listerRegistry(d *dump) kube_util.ListerRegistry {
	if d.controllers() == 0 {
		return nil
	}
	return kube_util.NewListerRegistry(nil, nil, nil, nil,
		v1appslister.NewDaemonSetLister(indexer(d.daemonSets)),
		v1lister.NewReplicationControllerLister(indexer(d.replicationControllers)),
		v1batchlister.NewJobLister(indexer(d.jobs)),
		v1appslister.NewReplicaSetLister(indexer(d.replicaSets)),
		v1appslister.NewStatefulSetLister(indexer(d.statefulSets)))
}

// gpuProvider is the cloud provider as far as gpu.GetNodeGPUFromCloudProvider asks it: its GPU label (the kwok
// provider's nodes.gpuConfig.gpuLabelKey). Any other method would panic on the nil interface: none is called.
type gpuProvider struct {
	cloudprovider.CloudProvider
	label string
}

func (p gpuProvider) GPULabel() string { return p.label }

var outcomes = []string{"Undefined", "DrainOk", "BlockDrain", "SkipDrain", "WaitForCompletion"}

func outcomeName(o drainability.OutcomeType) string {
	if int(o) >= 0 && int(o) < len(outcomes) {
		return outcomes[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

func judge(d *dump, o *options, now time.Time) ([]nodeAnswer, error) {
	tracker := pdb.NewBasicRemainingPdbTracker()
	if err := tracker.SetPdbs(d.pdbs); err != nil {
		return nil, fmt.Errorf("pdb tracker: %w", err)
	}
	listed, panics, err := listAll(d.pods)
	if err != nil {
		return nil, err
	}
	drainCtx := &drainability.DrainContext{RemainingPdbTracker: tracker, Listers: listerRegistry(d), Timestamp: now}
	chain := rules.Default(deleteOptions(o))
	provider := gpuProvider{label: o.gpuLabel}

	nodes := append([]*apiv1.Node(nil), d.nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	out := []nodeAnswer{}
	for _, node := range nodes {
		var onNode []*apiv1.Pod
		for _, p := range listed {
			if p.Spec.NodeName == node.Name {
				onNode = append(onNode, p)
			}
		}
		ni := newNodeInfo(node, onNode)
		gpuConfig := gpu.GetNodeGPUFromCloudProvider(provider, node)
		a := nodeAnswer{Node: node.Name, ScaleDownDisabled: eligibility.HasNoScaleDownAnnotation(node),
			Threshold: o.threshold, Pods: []podAnswer{}}
		if gpuConfig != nil {
			a.GPU = &gpuAnswer{Label: gpuConfig.Label, Type: gpuConfig.Type, Resource: gpuResource(gpuConfig)}
			a.Threshold = o.gpuThreshold
		}
		info, err := calculate(ni, o, gpuConfig, now)
		if err != nil {
			a.UtilizationError = err.Error()
		} else {
			a.Utilization = &utilizationAnswer{CPU: number(info.CpuUtil), Memory: number(info.MemUtil),
				GPU: number(info.GpuUtil), Value: number(info.Utilization), Resource: string(info.ResourceName)}
			under := atOrBelowThreshold(info.Utilization, a.Threshold)
			a.Underutilized = &under
		}
		for _, p := range onNode {
			a.Pods = append(a.Pods, drainable(chain, drainCtx, p, ni))
		}
		for key, why := range panics[node.Name] {
			if a.Panic == nil {
				a.Panic = map[string]string{}
			}
			a.Panic[key] = why
		}
		out = append(out, a)
	}
	return out, nil
}

// listAll is listPods over the whole dump; where it panics, each pod is listed alone to name the pods it panics on
// (those are left out of the snapshot and reported per node, "namespace/name" -> the panic).
func listAll(pods []*apiv1.Pod) ([]*apiv1.Pod, map[string]map[string]string, error) {
	listed, err := listPods(pods)
	if err == nil {
		return listed, nil, nil
	}
	panics := map[string]map[string]string{}
	listed = nil
	for _, p := range pods {
		one, err := listPods([]*apiv1.Pod{p})
		if err != nil {
			if panics[p.Spec.NodeName] == nil {
				panics[p.Spec.NodeName] = map[string]string{}
			}
			panics[p.Spec.NodeName][p.Namespace+"/"+p.Name] = err.Error()
			continue
		}
		listed = append(listed, one...)
	}
	return listed, panics, nil
}

func drainable(chain rules.Rules, drainCtx *drainability.DrainContext, p *apiv1.Pod, ni *nodeInfo) (a podAnswer) {
	a = podAnswer{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	defer func() {
		if r := recover(); r != nil {
			a.Panic = fmt.Sprint(r)
		}
	}()
	status := chain.Drainable(drainCtx, p, ni)
	a.Outcome = outcomeName(status.Outcome)
	if status.Outcome == drainability.BlockDrain {
		a.Reason = status.BlockingReason.String()
	}
	if status.Error != nil {
		a.Error = status.Error.Error()
	}
	return a
}
