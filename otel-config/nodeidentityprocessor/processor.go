// Package nodeidentityprocessor decides which node a push is for and keeps only the agent's series.
//
// The OTLP receiver's oidc authenticator has verified the push's projected ServiceAccount token
// (signature, issuer, audience, expiry) against the API server's OIDC discovery and JWKS. A
// pod-bound token names the pod's node in its "kubernetes.io" claim ({"node": {"name": ...}}).
// This processor:
//   - refuses (403) a push whose token is not the agent's ServiceAccount or names no node;
//   - replaces every resource attribute: k8s.node.name is the token's node, service.name and
//     service.instance.id are fixed from it, whatever the sender wrote (so a pod cannot write
//     another node's numbers, and no sender-chosen or version-dependent resource label exists);
//   - clears the scope's version and attributes (they change on every upgrade);
//   - drops every metric whose name is not in the allow-list or that arrives with another type
//     than the one declared for it (a gauge sent as a histogram or summary would create
//     _bucket/_sum/quantile series), and every point attribute not allowed for that metric; the types
//     that can be declared are the agent's (gauge, sum, histogram): exponential histograms and summaries
//     are always dropped;
//   - drops a point of a per-pod metric (one whose allowed keys include k8s.pod.uid) that carries no
//     uid, a point with an attribute value longer than max_label_value_length, and a histogram point of
//     more than max_histogram_buckets buckets;
//   - keeps a per-node pod budget: at most max_pods_per_node distinct k8s.pod.uid values per node
//     within pod_window; points of further pods are dropped (a compromised agent cannot create
//     series for more pods than a node can run);
//   - keeps a per-node series budget: at most max_series_per_node distinct series as Prometheus stores
//     them (metric name and attribute values: uids x names x label values; a histogram point is a _bucket
//     series per bound and +Inf, _count and _sum) per node within pod_window; a point whose series do not
//     all fit is dropped (one uid with thousands of pod names, free info values, fresh bucket bounds).
//
// A point refused by one check takes no place in a later one: a point the series budget refuses does not
// keep a place in the pod budget.
//
// Every dropped point is counted in otelcol_nodeidentity_dropped_points{reason,node}.
//
// The contrib transform and filter processors could express most of this in OTTL, but their
// 0.165 modules cannot be built from the Go module proxy here (pkg/expohisto and
// pkg/ottl/contexts/xprofile are not served), and no contrib processor reads a nested claim.
package nodeidentityprocessor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nra.local/nodeidentityprocessor/internal/subject"
)

const typeStr = "nodeidentity"

// Defaults of the pod budget: the kubelet's default maxPods (110) for the pods running, and as many
// again for pods that ended within the window (a Job's completed pods, a Deployment's rollout).
const (
	DefaultMaxPodsPerNode = 220
	DefaultPodWindow      = time.Minute
	// DefaultMaxSeriesPerNode: the series of DefaultMaxPodsPerNode pods, each a VM during a migration
	// and blocking (7 per-pod series), and the node's own (under 150), with room (docs/deployment.md).
	DefaultMaxSeriesPerNode = 2048
	// DefaultMaxLabelValueLength: the longest value Kubernetes writes into one (a pod name, 253).
	DefaultMaxLabelValueLength = 253
	// DefaultMaxHistogramBuckets: the agent's histograms have 25 buckets (agent/telemetry/stats.py's 24
	// LATENCY_BUCKETS and +Inf); over twice that leaves room for a finer set, not for a bucket per value.
	DefaultMaxHistogramBuckets = 64
	uidKey                     = "k8s.pod.uid"
)

// Metric types as the configuration names them: the OTLP data kinds the agent sends, and only those
// (an exponential histogram or a summary would need its own series count; the agent sends neither).
var typeNames = map[pmetric.MetricType]string{
	pmetric.MetricTypeGauge:     "gauge",
	pmetric.MetricTypeSum:       "sum",
	pmetric.MetricTypeHistogram: "histogram",
}

// Config of the processor. Metrics maps each declared type (gauge, sum, histogram, ...) to the
// metric names admitted with that type and, for each, the point attribute keys it may carry.
type Config struct {
	ServiceAccount string                         `mapstructure:"service_account"`
	ServiceName    string                         `mapstructure:"service_name"`
	Metrics        map[string]map[string][]string `mapstructure:"metrics"`
	// MaxPodsPerNode bounds the distinct k8s.pod.uid values one node's pushes may carry within PodWindow.
	MaxPodsPerNode int           `mapstructure:"max_pods_per_node"`
	PodWindow      time.Duration `mapstructure:"pod_window"`
	// MaxSeriesPerNode bounds the distinct series (name and attribute values) one node's pushes may carry within PodWindow.
	MaxSeriesPerNode int `mapstructure:"max_series_per_node"`
	// MaxLabelValueLength bounds each attribute value a point keeps; a point with a longer one is dropped.
	MaxLabelValueLength int `mapstructure:"max_label_value_length"`
	// MaxHistogramBuckets bounds a histogram point's buckets (its bounds and +Inf); a point with more is dropped.
	MaxHistogramBuckets int `mapstructure:"max_histogram_buckets"`
}

// Validate is called by the Collector when it loads the configuration.
func (c *Config) Validate() error {
	if c.ServiceAccount == "" {
		return errors.New("service_account is required (the agent's system:serviceaccount:<namespace>:<name>)")
	}
	if len(c.Metrics) == 0 {
		return errors.New("metrics (the allow-list) is required")
	}
	known := make([]string, 0, len(typeNames))
	for _, t := range typeNames {
		known = append(known, t)
	}
	seen := map[string]string{}
	for typ, names := range c.Metrics {
		if !containsString(known, typ) {
			return fmt.Errorf("metrics: unknown type %q (one of %s)", typ, strings.Join(known, ", "))
		}
		for name := range names {
			if other, dup := seen[name]; dup {
				return fmt.Errorf("metrics: %q is declared as both %s and %s", name, other, typ)
			}
			seen[name] = typ
		}
	}
	if c.MaxPodsPerNode < 1 {
		return errors.New("max_pods_per_node must be at least 1")
	}
	if c.PodWindow <= 0 {
		return errors.New("pod_window must be positive")
	}
	if c.MaxSeriesPerNode < 1 {
		return errors.New("max_series_per_node must be at least 1")
	}
	if c.MaxLabelValueLength < 1 {
		return errors.New("max_label_value_length must be at least 1")
	}
	if c.MaxHistogramBuckets < 1 {
		return errors.New("max_histogram_buckets must be at least 1")
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// NewFactory is what the builder's components.go registers.
func NewFactory() processor.Factory {
	return processor.NewFactory(component.MustNewType(typeStr), func() component.Config {
		return &Config{ServiceName: "node-requests-agent", MaxPodsPerNode: DefaultMaxPodsPerNode, PodWindow: DefaultPodWindow,
			MaxSeriesPerNode: DefaultMaxSeriesPerNode, MaxLabelValueLength: DefaultMaxLabelValueLength,
			MaxHistogramBuckets: DefaultMaxHistogramBuckets}
	}, processor.WithMetrics(createMetrics, component.StabilityLevelDevelopment))
}

// allowance is what the configuration admits for one metric name.
type allowance struct {
	typ    pmetric.MetricType
	keys   map[string]struct{}
	perPod bool // its keys include k8s.pod.uid: every point must carry one
}

type identity struct {
	cfg     *Config
	allowed map[string]allowance
	budget  *budget // pods: node -> k8s.pod.uid
	series  *budget // node -> series key
	seed    maphash.Seed
	dropped metric.Int64Counter
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	p, err := newIdentity(cfg.(*Config), set.TelemetrySettings.MeterProvider.Meter("nra.local/nodeidentityprocessor"), time.Now)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, p.process,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

func newIdentity(c *Config, meter metric.Meter, now func() time.Time) (*identity, error) {
	byName := make(map[string]pmetric.MetricType, len(typeNames))
	for t, name := range typeNames {
		byName[name] = t
	}
	p := &identity{cfg: c, allowed: map[string]allowance{}, budget: newBudget(c.MaxPodsPerNode, c.PodWindow, now),
		series: newBudget(c.MaxSeriesPerNode, c.PodWindow, now), seed: maphash.MakeSeed()}
	for typ, names := range c.Metrics {
		for name, keys := range names {
			set := make(map[string]struct{}, len(keys))
			for _, k := range keys {
				set[k] = struct{}{}
			}
			p.allowed[name] = allowance{typ: byName[typ], keys: set, perPod: slices.Contains(keys, uidKey)}
		}
	}
	var err error
	p.dropped, err = meter.Int64Counter("otelcol_nodeidentity_dropped_points",
		metric.WithDescription("Points the nodeidentity processor dropped: reason pod_budget (a pod beyond the node's "+
			"budget), series_budget (a series beyond it), missing_uid (a per-pod metric without k8s.pod.uid), "+
			"label_too_long (an attribute value over max_label_value_length), too_many_buckets (a histogram point "+
			"over max_histogram_buckets) or wrong_type (an allowed name sent with another type than declared)"),
		metric.WithUnit("{point}"))
	return p, err
}

func (p *identity) process(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	node, err := subject.Node(ctx, p.cfg.ServiceAccount)
	if err != nil {
		// PermissionDenied: the OTLP receiver answers HTTP 403 (gRPC PERMISSION_DENIED), not retryable.
		return md, status.Error(codes.PermissionDenied, err.Error())
	}
	drops := map[string]int64{}
	defer func() {
		for reason, n := range drops {
			if n > 0 {
				p.dropped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason), attribute.String("node", node)))
			}
		}
	}()
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		attrs := rm.Resource().Attributes()
		attrs.Clear()
		attrs.PutStr("k8s.node.name", node)
		attrs.PutStr("service.name", p.cfg.ServiceName)
		attrs.PutStr("service.instance.id", node)
		rm.SetSchemaUrl("")
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			sm := sms.At(j)
			sm.Scope().SetVersion("")
			sm.Scope().Attributes().Clear()
			sm.SetSchemaUrl("")
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool {
				allowed, ok := p.allowed[m.Name()]
				if !ok {
					return true
				}
				if m.Type() != allowed.typ {
					drops["wrong_type"] += int64(pointCount(m))
					return true
				}
				forEachPointAttributes(m, func(a pcommon.Map) {
					a.RemoveIf(func(k string, _ pcommon.Value) bool { _, keep := allowed.keys[k]; return !keep })
				})
				p.removeRefusedPoints(node, m, allowed, drops)
				return pointCount(m) == 0
			})
		}
		sms.RemoveIf(func(sm pmetric.ScopeMetrics) bool { return sm.Metrics().Len() == 0 })
	}
	rms.RemoveIf(func(rm pmetric.ResourceMetrics) bool { return rm.ScopeMetrics().Len() == 0 })
	if rms.Len() == 0 {
		return md, processorhelper.ErrSkipProcessingData
	}
	return md, nil
}

func forEachPointAttributes(m pmetric.Metric, f func(pcommon.Map)) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		for i, dps := 0, m.Gauge().DataPoints(); i < dps.Len(); i++ {
			f(dps.At(i).Attributes())
		}
	case pmetric.MetricTypeSum:
		for i, dps := 0, m.Sum().DataPoints(); i < dps.Len(); i++ {
			f(dps.At(i).Attributes())
		}
	case pmetric.MetricTypeHistogram:
		for i, dps := 0, m.Histogram().DataPoints(); i < dps.Len(); i++ {
			f(dps.At(i).Attributes())
		}
	}
}

func pointCount(m pmetric.Metric) int {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints().Len()
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints().Len()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().DataPoints().Len()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().DataPoints().Len()
	case pmetric.MetricTypeSummary:
		return m.Summary().DataPoints().Len()
	}
	return 0
}

// removeRefusedPoints drops the points of m that the node may not write, counting each in drops by reason:
// a per-pod point without a uid, an attribute value too long, a histogram of too many buckets, a pod beyond
// the pod budget, a series beyond the series budget. The checks run in that order, and a point refused by
// one takes no place in the next: the pod budget records a uid only once the point's series are admitted.
func (p *identity) removeRefusedPoints(node string, m pmetric.Metric, allowed allowance, drops map[string]int64) {
	var keys []uint64 // the series of one point, reused from point to point
	refuse := func(a pcommon.Map, h *pmetric.HistogramDataPoint) bool {
		var reason string
		reason, keys = p.refusal(node, m.Name(), allowed, a, h, keys[:0])
		if reason != "" {
			drops[reason]++
		}
		return reason != ""
	}
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		m.Gauge().DataPoints().RemoveIf(func(dp pmetric.NumberDataPoint) bool { return refuse(dp.Attributes(), nil) })
	case pmetric.MetricTypeSum:
		m.Sum().DataPoints().RemoveIf(func(dp pmetric.NumberDataPoint) bool { return refuse(dp.Attributes(), nil) })
	case pmetric.MetricTypeHistogram:
		m.Histogram().DataPoints().RemoveIf(func(dp pmetric.HistogramDataPoint) bool { return refuse(dp.Attributes(), &dp) })
	}
}

// refusal is why a point with attributes a (already reduced to the allowed keys), and h if it is a histogram's,
// may not be written, or ""; it returns keys with the point's series appended.
func (p *identity) refusal(node, name string, allowed allowance, a pcommon.Map, h *pmetric.HistogramDataPoint, keys []uint64) (string, []uint64) {
	tooLong := false
	a.Range(func(_ string, v pcommon.Value) bool {
		tooLong = len(v.AsString()) > p.cfg.MaxLabelValueLength
		return !tooLong
	})
	if tooLong {
		return "label_too_long", keys
	}
	uid, ok := a.Get(uidKey)
	if allowed.perPod && (!ok || uid.AsString() == "") {
		return "missing_uid", keys
	}
	if h != nil && (h.ExplicitBounds().Len()+1 > p.cfg.MaxHistogramBuckets || h.BucketCounts().Len() > p.cfg.MaxHistogramBuckets) {
		return "too_many_buckets", keys
	}
	keys = p.seriesKeys(keys, name, a, h)
	if !ok {
		if !p.series.admit(node, keys, nil) {
			return "series_budget", keys
		}
		return "", keys
	}
	if len(uid.AsString()) > maxUIDLength {
		return "pod_budget", keys
	}
	seriesRefused := false
	if !p.budget.admit(node, []uint64{maphash.String(p.seed, uid.AsString())}, func() bool {
		seriesRefused = !p.series.admit(node, keys, nil)
		return !seriesRefused
	}) {
		if seriesRefused {
			return "series_budget", keys
		}
		return "pod_budget", keys
	}
	return "", keys
}

// seriesKeys appends to keys the series Prometheus stores for a point of metric name with attributes a, each
// a 64-bit hash of the series' name and its sorted labels (the resource's labels are the node's, the same for
// every point of a push): one for a gauge's or sum's point; for a histogram's (h), as the
// prometheusremotewrite exporter translates it, a _bucket series per bound it pairs with a bucket count and
// one for +Inf, each with its le label, then _count, and _sum when the point has a sum.
func (p *identity) seriesKeys(keys []uint64, name string, a pcommon.Map, h *pmetric.HistogramDataPoint) []uint64 {
	labels := make([]string, 0, a.Len())
	a.Range(func(k string, _ pcommon.Value) bool { labels = append(labels, k); return true })
	slices.Sort(labels)
	var base maphash.Hash
	base.SetSeed(p.seed)
	for _, k := range labels {
		v, _ := a.Get(k)
		base.WriteByte(0)
		base.WriteString(k)
		base.WriteByte(0)
		base.WriteString(v.AsString())
	}
	series := func(suffix, le string) uint64 {
		one := base // a copy: the labels hashed once, the name and le per series
		one.WriteByte(1)
		one.WriteString(name)
		one.WriteString(suffix)
		one.WriteByte(0)
		one.WriteString(le)
		return one.Sum64()
	}
	if h == nil {
		return append(keys, series("", ""))
	}
	for i := 0; i < h.ExplicitBounds().Len() && i < h.BucketCounts().Len(); i++ {
		keys = append(keys, series("_bucket", strconv.FormatFloat(h.ExplicitBounds().At(i), 'f', -1, 64)))
	}
	keys = append(keys, series("_bucket", "+Inf"), series("_count", ""))
	if h.HasSum() {
		keys = append(keys, series("_sum", ""))
	}
	return keys
}

// budget remembers, per node, the keys (64-bit hashes of pod uids, or of series) seen within the window: at
// most max per node. A key not seen for a window frees its place. Memory: the hash and when it was last
// seen, 16 bytes, about 31 with the map's own (TestABudgetHoldsAFewDozenBytesPerKey); nodes come from
// verified tokens only, and a node not heard from for a window is forgotten. A key beyond a full budget is refused in constant time: the node's keys are scanned for
// expired ones only when the oldest of them may have expired.
type budget struct {
	mu        sync.Mutex
	max       int
	window    int64 // nanoseconds
	now       func() time.Time
	nodes     map[string]*seen
	lastSweep int64
}

// seen is one node's keys with when each was last seen (Unix nanoseconds), and a time no later than the oldest.
type seen struct {
	keys   map[uint64]int64
	oldest int64
}

// maxUIDLength: a Kubernetes UID is a 36-character UUID; a longer value is not a pod's.
const maxUIDLength = 64

func newBudget(max int, window time.Duration, now func() time.Time) *budget {
	return &budget{max: max, window: int64(window), now: now, nodes: map[string]*seen{}, lastSweep: now().UnixNano()}
}

// admit reports whether every key fits node's budget now and, when also is given, whether also admits too;
// only then are the keys recorded as seen (a refused point takes no place). also runs under b's lock, so
// nothing takes the place it was checked for meanwhile; it must not use b.
func (b *budget) admit(node string, keys []uint64, also func() bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UnixNano()
	if now-b.lastSweep >= b.window {
		b.sweep(now)
	}
	s := b.nodes[node]
	if s == nil {
		s = &seen{keys: map[uint64]int64{}, oldest: now}
		b.nodes[strings.Clone(node)] = s
	}
	if len(s.keys)+s.unknown(keys) > b.max {
		if now-s.oldest < b.window {
			return false
		}
		s.expire(now, b.window)
		if len(s.keys)+s.unknown(keys) > b.max {
			return false
		}
	}
	if also != nil && !also() {
		return false
	}
	for _, key := range keys {
		s.keys[key] = now
	}
	return true
}

// unknown is how many of keys the node has not seen within the window (a key given twice counts twice: at
// most an early refusal, never a place too many).
func (s *seen) unknown(keys []uint64) int {
	n := 0
	for _, key := range keys {
		if _, known := s.keys[key]; !known {
			n++
		}
	}
	return n
}

// sweep forgets every key not seen within the window, and nodes left without keys.
func (b *budget) sweep(now int64) {
	for node, s := range b.nodes {
		if s.expire(now, b.window); len(s.keys) == 0 {
			delete(b.nodes, node)
		}
	}
	b.lastSweep = now
}

func (s *seen) expire(now, window int64) {
	s.oldest = now
	for key, at := range s.keys {
		if now-at >= window {
			delete(s.keys, key)
		} else if at < s.oldest {
			s.oldest = at
		}
	}
}
