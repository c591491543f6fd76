package nodeidentityprocessor

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processorhelper"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"nra.local/nodeidentityprocessor/internal/subjecttest"
)

const agentSA = subjecttest.AgentSA

func nodeContext(node string) context.Context {
	return subjecttest.Context(context.Background(), subjecttest.Agent(node))
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestIdentity(t *testing.T, maxPods int, options ...func(*Config)) (*identity, *clock, *sdkmetric.ManualReader) {
	t.Helper()
	cfg := &Config{ServiceAccount: agentSA, ServiceName: "node-requests-agent", MaxPodsPerNode: maxPods,
		PodWindow: time.Minute, MaxSeriesPerNode: 10_000, MaxLabelValueLength: DefaultMaxLabelValueLength,
		MaxHistogramBuckets: DefaultMaxHistogramBuckets, Metrics: map[string]map[string][]string{
			"gauge": {"pod_or_vm_cpu_requests": {"k8s.pod.uid", "k8s.pod.name"},
				"node_requests_agent_kubernetes_info": {"server_version", "rules", "source"}},
			"histogram": {"node_requests_agent_export_duration_seconds": {}},
		}}
	for _, option := range options {
		option(cfg)
	}
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

// push is one push of pod_or_vm_cpu_requests, a point per (uid, pod name) pair; an empty uid is left out.
func push(pairs ...[2]string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("pod_or_vm_cpu_requests")
	dps := m.SetEmptyGauge().DataPoints()
	for _, p := range pairs {
		dp := dps.AppendEmpty()
		if p[0] != "" {
			dp.Attributes().PutStr("k8s.pod.uid", p[0])
		}
		dp.Attributes().PutStr("k8s.pod.name", p[1])
		dp.SetDoubleValue(0.5)
	}
	return md
}

// pods is one push for the given pod uids, each under its own name.
func pods(uids ...string) pmetric.Metrics {
	pairs := make([][2]string, len(uids))
	for i, uid := range uids {
		pairs[i] = [2]string{uid, "p-" + uid}
	}
	return push(pairs...)
}

// named is one push for one uid under many pod names (or none: uid "").
func named(uid string, names ...string) pmetric.Metrics {
	pairs := make([][2]string, len(names))
	for i, name := range names {
		pairs[i] = [2]string{uid, name}
	}
	return push(pairs...)
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

// dropped is otelcol_nodeidentity_dropped_points by "reason/node".
func dropped(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	return subjecttest.Counts(t, reader, "otelcol_nodeidentity_dropped_points")
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
		return &Config{ServiceAccount: agentSA, Metrics: m, MaxPodsPerNode: 1, PodWindow: time.Second,
			MaxSeriesPerNode: 1, MaxLabelValueLength: 1, MaxHistogramBuckets: 1}
	}
	if err := base(map[string]map[string][]string{"gauges": {"a": nil}}).Validate(); err == nil {
		t.Fatal("unknown type accepted")
	}
	// The agent sends neither; their series are not counted by the budget, so they cannot be declared.
	for _, typ := range []string{"exponential_histogram", "summary"} {
		if err := base(map[string]map[string][]string{typ: {"a": nil}}).Validate(); err == nil {
			t.Fatalf("%s accepted", typ)
		}
	}
	if err := base(map[string]map[string][]string{"gauge": {"a": nil}, "sum": {"a": nil}}).Validate(); err == nil {
		t.Fatal("a name declared with two types accepted")
	}
	c := base(map[string]map[string][]string{"gauge": {"a": nil}})
	if err := c.Validate(); err != nil {
		t.Fatalf("a valid config refused: %v", err)
	}
	c.MaxPodsPerNode = 0
	if c.Validate() == nil {
		t.Fatal("max_pods_per_node 0 accepted")
	}
	c.MaxPodsPerNode, c.MaxSeriesPerNode = 1, 0
	if c.Validate() == nil {
		t.Fatal("max_series_per_node 0 accepted")
	}
	c.MaxSeriesPerNode, c.MaxHistogramBuckets = 1, 0
	if c.Validate() == nil {
		t.Fatal("max_histogram_buckets 0 accepted")
	}
}

func TestDefaultBudgetIsTheKubeletsMaxPodsPlusAsManyEnded(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	if cfg.MaxPodsPerNode != 2*110 || cfg.PodWindow != time.Minute {
		t.Fatalf("defaults %d %s", cfg.MaxPodsPerNode, cfg.PodWindow)
	}
}

func pointCountOf(md pmetric.Metrics) int {
	n := 0
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			for k := 0; k < sms.At(j).Metrics().Len(); k++ {
				n += pointCount(sms.At(j).Metrics().At(k))
			}
		}
	}
	return n
}

func TestAPerPodPointWithoutAUIDIsDroppedAndCounted(t *testing.T) {
	p, _, reader := newTestIdentity(t, 10)
	_, err := p.process(nodeContext("node-a"), named("", numbered("web", 5)...))
	if err != processorhelper.ErrSkipProcessingData {
		t.Fatalf("a push of only uid-less per-pod points was written (err %v)", err)
	}
	// An empty uid is no uid either; a node metric needs none.
	md := named("", "web")
	md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0).Attributes().PutStr("k8s.pod.uid", "")
	info := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
	info.SetName("node_requests_agent_kubernetes_info")
	info.SetEmptyGauge().DataPoints().AppendEmpty().Attributes().PutStr("rules", "1.36")
	out, _ := p.process(nodeContext("node-a"), md)
	if got := pointCountOf(out); got != 1 {
		t.Fatalf("%d points kept, want the info point only", got)
	}
	if got := dropped(t, reader); got["missing_uid/node-a"] != 6 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want missing_uid/node-a 6", got)
	}
}

func TestOneUIDWithManyNamesIsBoundedByTheSeriesBudget(t *testing.T) {
	p, c, reader := newTestIdentity(t, 10, func(cfg *Config) { cfg.MaxSeriesPerNode = 100 })
	out, _ := p.process(nodeContext("node-a"), named("one-uid", numbered("name", 20_000)...))
	if got := pointCountOf(out); got != 100 {
		t.Fatalf("%d series kept, want the budget's 100", got)
	}
	// Series already admitted stay admitted; a new one (another uid) finds no place within the window.
	out, _ = p.process(nodeContext("node-a"), named("one-uid", numbered("name", 100)...))
	if got := pointCountOf(out); got != 100 {
		t.Fatalf("%d of the admitted series kept on the next push", got)
	}
	if _, err := p.process(nodeContext("node-a"), named("other-uid", "x")); err != processorhelper.ErrSkipProcessingData {
		t.Fatalf("a series beyond the full budget was written (err %v)", err)
	}
	// Another node has its own budget; a window later the unseen series have freed their places.
	if out, _ = p.process(nodeContext("node-b"), named("b-uid", "b")); pointCountOf(out) != 1 {
		t.Fatal("node-b's series refused")
	}
	c.t = c.t.Add(61 * time.Second)
	if out, _ = p.process(nodeContext("node-a"), named("other-uid", "x")); pointCountOf(out) != 1 {
		t.Fatal("a series refused after the window")
	}
	if got := dropped(t, reader); got["series_budget/node-a"] != 19_900+1 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want series_budget/node-a 19901", got)
	}
}

func TestFreeInfoValuesAreBoundedByLengthAndSeries(t *testing.T) {
	p, _, reader := newTestIdentity(t, 10, func(cfg *Config) { cfg.MaxSeriesPerNode = 5 })
	md := pmetric.NewMetrics()
	dps := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	dps.SetName("node_requests_agent_kubernetes_info")
	points := dps.SetEmptyGauge().DataPoints()
	points.AppendEmpty().Attributes().PutStr("server_version", strings.Repeat("v", DefaultMaxLabelValueLength+1))
	for _, v := range numbered("v1.37.", 50) {
		points.AppendEmpty().Attributes().PutStr("server_version", v)
	}
	out, _ := p.process(nodeContext("node-a"), md)
	if got := pointCountOf(out); got != 5 {
		t.Fatalf("%d info series kept, want 5", got)
	}
	if got := dropped(t, reader); got["label_too_long/node-a"] != 1 || got["series_budget/node-a"] != 45 {
		t.Fatalf("dropped points counted %v", got)
	}
}

func TestAFullBudgetRefusesWithoutScanningItsEntries(t *testing.T) {
	b := newBudget(100_000, time.Minute, (&clock{t: time.Unix(0, 0)}).now)
	for i := uint64(0); i < 100_000; i++ {
		b.admit("n", []uint64{i}, nil)
	}
	start := time.Now()
	for i := uint64(0); i < 100_000; i++ {
		if b.admit("n", []uint64{100_000 + i}, nil) {
			t.Fatal("admitted beyond the budget")
		}
	}
	// A scan of the 100,000 entries per refusal would take minutes; constant-time refusals take milliseconds.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("100,000 refusals took %s", d)
	}
}

func TestABudgetHoldsAFewDozenBytesPerKey(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := newBudget(2048, time.Minute, (&clock{t: time.Unix(0, 0)}).now)
	// 1,000 nodes of 594 series each: a 110-pod node of NeonVMs (docs/deployment.md).
	for n := 0; n < 1000; n++ {
		node := fmt.Sprint("node-", n)
		for k := uint64(0); k < 594; k++ {
			b.admit(node, []uint64{k}, nil)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / 594_000
	t.Logf("%.1f bytes per key", perKey)
	if perKey > 40 {
		t.Fatalf("%.1f bytes per key", perKey)
	}
	runtime.KeepAlive(b)
}

// histograms is one push of node_requests_agent_export_duration_seconds, a point per list of bounds (with a
// bucket count per bucket and a sum, as the agent sends them).
func histograms(bounds ...[]float64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("node_requests_agent_export_duration_seconds")
	dps := m.SetEmptyHistogram().DataPoints()
	for _, b := range bounds {
		dp := dps.AppendEmpty()
		dp.ExplicitBounds().FromRaw(b)
		dp.BucketCounts().FromRaw(make([]uint64, len(b)+1))
		dp.SetSum(1)
	}
	return md
}

// bounds is n bucket bounds starting at from (the agent's histograms: 24).
func bounds(from float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = from + float64(i)
	}
	return out
}

func TestAHistogramPointCountsEveryBucketSeriesAgainstTheSeriesBudget(t *testing.T) {
	p, _, reader := newTestIdentity(t, 10, func(cfg *Config) { cfg.MaxSeriesPerNode = 90 })
	// An honest point: 24 bounds, +Inf, _count, _sum = 27 series; a point of 24 other bounds adds 24 _bucket series
	// (+Inf, _count and _sum are the same series). Three points make 75; a fourth with fresh bounds (the attack: new
	// bounds on every push) would make 99: refused, though it is a single point.
	honest := bounds(0, 24)
	out, _ := p.process(nodeContext("node-a"), histograms(honest, bounds(100, 24), bounds(200, 24)))
	if got := pointCountOf(out); got != 3 {
		t.Fatalf("%d points kept, want 3", got)
	}
	if _, err := p.process(nodeContext("node-a"), histograms(bounds(300, 24))); err != processorhelper.ErrSkipProcessingData {
		t.Fatalf("a histogram point beyond the series budget was written (err %v)", err)
	}
	// The honest point's series are known: it keeps being written.
	if out, _ = p.process(nodeContext("node-a"), histograms(honest)); pointCountOf(out) != 1 {
		t.Fatal("an admitted histogram point refused on the next push")
	}
	if got := dropped(t, reader); got["series_budget/node-a"] != 1 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want series_budget/node-a 1", got)
	}
}

func TestAHistogramPointOfMoreBucketsThanTheBoundIsDropped(t *testing.T) {
	p, _, reader := newTestIdentity(t, 10)
	// 63 bounds are 64 buckets: kept. 64 bounds, and the attack's 130,000 (each a _bucket series), are dropped.
	out, _ := p.process(nodeContext("node-a"), histograms(bounds(0, 63), bounds(0, 64), bounds(0, 130_000)))
	if got := pointCountOf(out); got != 1 {
		t.Fatalf("%d points kept, want the one of 64 buckets", got)
	}
	// More bucket counts than the bound, however few bounds, is no honest point either.
	md := histograms(bounds(0, 3))
	md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Histogram().DataPoints().At(0).BucketCounts().
		FromRaw(make([]uint64, DefaultMaxHistogramBuckets+1))
	if _, err := p.process(nodeContext("node-a"), md); err != processorhelper.ErrSkipProcessingData {
		t.Fatalf("a point of %d bucket counts was written (err %v)", DefaultMaxHistogramBuckets+1, err)
	}
	if got := dropped(t, reader); got["too_many_buckets/node-a"] != 3 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want too_many_buckets/node-a 3", got)
	}
}

func TestAPointTheSeriesBudgetRefusesTakesNoPlaceInThePodBudget(t *testing.T) {
	p, _, reader := newTestIdentity(t, 2, func(cfg *Config) { cfg.MaxSeriesPerNode = 2 })
	// Pod a's two names fill the series budget; pod b's point is refused by it and must not hold b's place.
	out, _ := p.process(nodeContext("node-a"), push([2]string{"a", "a-1"}, [2]string{"a", "a-2"}, [2]string{"b", "b-1"}))
	if got := uids(out); len(got) != 2 || got[0] != "a" || got[1] != "a" {
		t.Fatalf("kept %v, want pod a's two series", got)
	}
	if held := len(p.budget.nodes["node-a"].keys); held != 1 {
		t.Fatalf("the pod budget holds %d uids, want pod a's only", held)
	}
	if got := dropped(t, reader); got["series_budget/node-a"] != 1 || len(got) != 1 {
		t.Fatalf("dropped points counted %v, want series_budget/node-a 1", got)
	}
}
