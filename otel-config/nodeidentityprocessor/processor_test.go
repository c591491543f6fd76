package nodeidentityprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

const agentSA = "system:serviceaccount:node-requests-agent:node-requests-agent"

// token is what the oidc authenticator puts in the request's context for a verified pod-bound token.
type token map[string]any

func (t token) GetAttribute(name string) any { return t[name] }
func (t token) GetAttributeNames() []string {
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	return names
}

func nodeContext(node string) context.Context {
	return client.NewContext(context.Background(), client.Info{Auth: token{
		"subject":             agentSA,
		"claims.kubernetes.io": map[string]any{"node": map[string]any{"name": node}},
	}})
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestIdentity(t *testing.T, maxPods int) (*identity, *clock, *sdkmetric.ManualReader) {
	t.Helper()
	cfg := &Config{ServiceAccount: agentSA, ServiceName: "node-requests-agent", MaxPodsPerNode: maxPods,
		PodWindow: time.Minute, Metrics: map[string]map[string][]string{
			"gauge":     {"pod_or_vm_cpu_requests": {"k8s.pod.uid", "k8s.pod.name"}},
			"histogram": {"node_requests_agent_export_duration_seconds": {}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	p, err := newIdentity(cfg, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"), c.now)
	if err != nil {
		t.Fatal(err)
	}
	return p, c, reader
}

// pods is one push of pod_or_vm_cpu_requests for the given pod uids.
func pods(uids ...string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("pod_or_vm_cpu_requests")
	dps := m.SetEmptyGauge().DataPoints()
	for _, uid := range uids {
		dp := dps.AppendEmpty()
		dp.Attributes().PutStr("k8s.pod.uid", uid)
		dp.Attributes().PutStr("k8s.pod.name", "p-"+uid)
		dp.SetDoubleValue(0.5)
	}
	return md
}

func uids(md pmetric.Metrics) []string {
	var out []string
	if md.ResourceMetrics().Len() == 0 {
		return out
	}
	dps := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints()
	for i := 0; i < dps.Len(); i++ {
		v, _ := dps.At(i).Attributes().Get("k8s.pod.uid")
		out = append(out, v.Str())
	}
	return out
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// dropped is otelcol_nodeidentity_dropped_points by (reason, node).
func dropped(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelcol_nodeidentity_dropped_points" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				reason, _ := dp.Attributes.Value("reason")
				node, _ := dp.Attributes.Value("node")
				out[reason.AsString()+"/"+node.AsString()] += dp.Value
			}
		}
	}
	return out
}

func TestPodsBeyondTheNodesBudgetAreDroppedAndCounted(t *testing.T) {
	p, _, reader := newTestIdentity(t, 3)
	out, err := p.process(nodeContext("node-a"), pods(numbered("u", 5)...))
	if err != nil {
		t.Fatal(err)
	}
	if got := uids(out); len(got) != 3 || got[0] != "u-0" || got[2] != "u-2" {
		t.Fatalf("kept %v, want the first three pods", got)
	}
	// The admitted pods stay admitted on the next push; a new one still finds no place.
	out, _ = p.process(nodeContext("node-a"), pods("u-4", "u-0", "u-1", "u-2"))
	if got := uids(out); len(got) != 3 || got[0] != "u-0" {
		t.Fatalf("kept %v on the second push", got)
	}
	// Another node has its own budget.
	out, _ = p.process(nodeContext("node-b"), pods(numbered("b", 3)...))
	if got := uids(out); len(got) != 3 {
		t.Fatalf("node-b kept %v", got)
	}
	if got := dropped(t, reader); got["pod_budget/node-a"] != 3 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want pod_budget/node-a 3", got)
	}
}

func TestAPodNotSeenForAWindowFreesItsPlace(t *testing.T) {
	p, c, _ := newTestIdentity(t, 2)
	_, _ = p.process(nodeContext("node-a"), pods("old-1", "old-2"))
	c.t = c.t.Add(30 * time.Second)
	_, _ = p.process(nodeContext("node-a"), pods("old-2"))
	c.t = c.t.Add(40 * time.Second) // old-1 unseen for 70 s, old-2 for 40 s
	out, _ := p.process(nodeContext("node-a"), pods("new-1", "new-2"))
	if got := uids(out); len(got) != 1 || got[0] != "new-1" {
		t.Fatalf("kept %v, want only new-1 (old-2 still holds its place)", got)
	}
	c.t = c.t.Add(2 * time.Minute) // everything expires; the sweep forgets the node
	_, _ = p.process(nodeContext("node-b"), pods("x"))
	if _, kept := p.budget.nodes["node-a"]; kept {
		t.Fatal("a node not heard from for a window is still remembered")
	}
}

func TestAUIDLongerThanAKubernetesUIDIsNotAdmitted(t *testing.T) {
	p, _, _ := newTestIdentity(t, 10)
	long := fmt.Sprintf("%065d", 1)
	out, _ := p.process(nodeContext("node-a"), pods(long, "ok"))
	if got := uids(out); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("kept %v", got)
	}
}

func TestAnAllowedNameWithAnotherTypeIsDropped(t *testing.T) {
	p, _, reader := newTestIdentity(t, 10)
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	h := ms.AppendEmpty() // declared gauge, sent as a histogram: would create _bucket/_sum/_count series
	h.SetName("pod_or_vm_cpu_requests")
	hp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.ExplicitBounds().FromRaw([]float64{1, 2})
	hp.BucketCounts().FromRaw([]uint64{1, 0, 0})
	s := ms.AppendEmpty() // declared gauge, sent as a summary: quantile series
	s.SetName("pod_or_vm_cpu_requests")
	s.SetEmptySummary().DataPoints().AppendEmpty().QuantileValues().AppendEmpty().SetQuantile(0.5)
	g := ms.AppendEmpty() // declared histogram, sent as a gauge
	g.SetName("node_requests_agent_export_duration_seconds")
	g.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(1)
	ok := ms.AppendEmpty() // declared histogram, sent as one
	ok.SetName("node_requests_agent_export_duration_seconds")
	ok.SetEmptyHistogram().DataPoints().AppendEmpty()
	out, err := p.process(nodeContext("node-a"), md)
	if err != nil {
		t.Fatal(err)
	}
	left := out.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	if left.Len() != 1 || left.At(0).Type() != pmetric.MetricTypeHistogram {
		t.Fatalf("%d metrics left, want only the declared histogram", left.Len())
	}
	if got := dropped(t, reader); got["wrong_type/node-a"] != 3 {
		t.Fatalf("dropped points counted %v, want wrong_type/node-a 3", got)
	}
}

func TestConfigRefusesUnknownTypesAndNamesDeclaredTwice(t *testing.T) {
	base := func(m map[string]map[string][]string) *Config {
		return &Config{ServiceAccount: agentSA, Metrics: m, MaxPodsPerNode: 1, PodWindow: time.Second}
	}
	if err := base(map[string]map[string][]string{"gauges": {"a": nil}}).Validate(); err == nil {
		t.Fatal("unknown type accepted")
	}
	if err := base(map[string]map[string][]string{"gauge": {"a": nil}, "sum": {"a": nil}}).Validate(); err == nil {
		t.Fatal("a name declared with two types accepted")
	}
	c := base(map[string]map[string][]string{"gauge": {"a": nil}})
	c.MaxPodsPerNode = 0
	if c.Validate() == nil {
		t.Fatal("max_pods_per_node 0 accepted")
	}
}

func TestDefaultBudgetIsTheKubeletsMaxPodsPlusAsManyEnded(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	if cfg.MaxPodsPerNode != 2*110 || cfg.PodWindow != time.Minute {
		t.Fatalf("defaults %d %s", cfg.MaxPodsPerNode, cfg.PodWindow)
	}
}
