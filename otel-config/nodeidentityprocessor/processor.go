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
//     _bucket/_sum/quantile series), and every point attribute not allowed for that metric;
//   - keeps a per-node pod budget: at most max_pods_per_node distinct k8s.pod.uid values per node
//     within pod_window; points of further pods are dropped (a compromised agent cannot create
//     series for more pods than a node can run).
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
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/client"
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
)

const typeStr = "nodeidentity"

// Defaults of the pod budget: the kubelet's default maxPods (110) for the pods running, and as many
// again for pods that ended within the window (a Job's completed pods, a Deployment's rollout).
const (
	DefaultMaxPodsPerNode = 220
	DefaultPodWindow      = time.Minute
	// maxUIDLength: a Kubernetes UID is a 36-character UUID; a longer value is not a pod's.
	maxUIDLength = 64
	uidKey       = "k8s.pod.uid"
)

// Metric types as the configuration names them (the OTLP data kinds the agent sends).
var typeNames = map[pmetric.MetricType]string{
	pmetric.MetricTypeGauge:                "gauge",
	pmetric.MetricTypeSum:                  "sum",
	pmetric.MetricTypeHistogram:            "histogram",
	pmetric.MetricTypeExponentialHistogram: "exponential_histogram",
	pmetric.MetricTypeSummary:              "summary",
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
		return &Config{ServiceName: "node-requests-agent", MaxPodsPerNode: DefaultMaxPodsPerNode, PodWindow: DefaultPodWindow}
	}, processor.WithMetrics(createMetrics, component.StabilityLevelDevelopment))
}

// allowance is what the configuration admits for one metric name.
type allowance struct {
	typ  pmetric.MetricType
	keys map[string]struct{}
}

type identity struct {
	cfg     *Config
	allowed map[string]allowance
	budget  *podBudget
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
	p := &identity{cfg: c, allowed: map[string]allowance{}, budget: newPodBudget(c.MaxPodsPerNode, c.PodWindow, now)}
	for typ, names := range c.Metrics {
		for name, keys := range names {
			set := make(map[string]struct{}, len(keys))
			for _, k := range keys {
				set[k] = struct{}{}
			}
			p.allowed[name] = allowance{typ: byName[typ], keys: set}
		}
	}
	var err error
	p.dropped, err = meter.Int64Counter("otelcol_nodeidentity_dropped_points",
		metric.WithDescription("Points the nodeidentity processor dropped: reason pod_budget (a pod beyond the node's "+
			"budget) or wrong_type (an allowed name sent with another type than declared)"),
		metric.WithUnit("{point}"))
	return p, err
}

// node is the node named by the verified token in the request's context, or an error saying why there is none.
func (p *identity) node(ctx context.Context) (string, error) {
	auth := client.FromContext(ctx).Auth
	if auth == nil {
		return "", errors.New("no verified token (is the receiver's oidc authenticator configured?)")
	}
	if subject, _ := auth.GetAttribute("subject").(string); subject != p.cfg.ServiceAccount {
		return "", fmt.Errorf("token subject %q is not the agent's ServiceAccount", subject)
	}
	claim, _ := auth.GetAttribute("claims.kubernetes.io").(map[string]any)
	node, _ := claim["node"].(map[string]any)
	name, _ := node["name"].(string)
	if name == "" {
		return "", errors.New("token names no node (not a pod-bound token of a scheduled pod)")
	}
	return name, nil
}

func (p *identity) process(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	node, err := p.node(ctx)
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
				drops["pod_budget"] += int64(p.removePointsBeyondBudget(node, m))
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
	case pmetric.MetricTypeExponentialHistogram:
		for i, dps := 0, m.ExponentialHistogram().DataPoints(); i < dps.Len(); i++ {
			f(dps.At(i).Attributes())
		}
	case pmetric.MetricTypeSummary:
		for i, dps := 0, m.Summary().DataPoints(); i < dps.Len(); i++ {
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

// removePointsBeyondBudget drops the points of m whose pod the node's budget does not admit; it returns how many.
func (p *identity) removePointsBeyondBudget(node string, m pmetric.Metric) int {
	removed := 0
	refuse := func(a pcommon.Map) bool {
		uid, ok := a.Get(uidKey)
		if !ok {
			return false
		}
		if !p.budget.admit(node, uid.AsString()) {
			removed++
			return true
		}
		return false
	}
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		m.Gauge().DataPoints().RemoveIf(func(dp pmetric.NumberDataPoint) bool { return refuse(dp.Attributes()) })
	case pmetric.MetricTypeSum:
		m.Sum().DataPoints().RemoveIf(func(dp pmetric.NumberDataPoint) bool { return refuse(dp.Attributes()) })
	case pmetric.MetricTypeHistogram:
		m.Histogram().DataPoints().RemoveIf(func(dp pmetric.HistogramDataPoint) bool { return refuse(dp.Attributes()) })
	case pmetric.MetricTypeExponentialHistogram:
		m.ExponentialHistogram().DataPoints().RemoveIf(func(dp pmetric.ExponentialHistogramDataPoint) bool {
			return refuse(dp.Attributes())
		})
	case pmetric.MetricTypeSummary:
		m.Summary().DataPoints().RemoveIf(func(dp pmetric.SummaryDataPoint) bool { return refuse(dp.Attributes()) })
	}
	return removed
}

// podBudget remembers, per node, the pods (k8s.pod.uid) seen within the window: at most max per node.
// A pod not seen for a window frees its place. Memory: nodes x max entries of at most maxUIDLength
// bytes; nodes come from verified tokens only, and a node not heard from for a window is forgotten.
type podBudget struct {
	mu        sync.Mutex
	max       int
	window    time.Duration
	now       func() time.Time
	nodes     map[string]map[string]time.Time
	lastSweep time.Time
}

func newPodBudget(max int, window time.Duration, now func() time.Time) *podBudget {
	return &podBudget{max: max, window: window, now: now, nodes: map[string]map[string]time.Time{}, lastSweep: now()}
}

// admit reports whether uid may be written for node now, and records it as seen.
func (b *podBudget) admit(node, uid string) bool {
	if len(uid) > maxUIDLength {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Sub(b.lastSweep) >= b.window {
		b.sweep(now)
	}
	pods := b.nodes[node]
	if pods == nil {
		pods = map[string]time.Time{}
		b.nodes[strings.Clone(node)] = pods
	}
	if _, known := pods[uid]; known {
		pods[uid] = now
		return true
	}
	if len(pods) >= b.max {
		expire(pods, now, b.window)
		if len(pods) >= b.max {
			return false
		}
	}
	pods[strings.Clone(uid)] = now
	return true
}

// sweep forgets every pod not seen within the window, and nodes left without pods.
func (b *podBudget) sweep(now time.Time) {
	for node, pods := range b.nodes {
		if expire(pods, now, b.window); len(pods) == 0 {
			delete(b.nodes, node)
		}
	}
	b.lastSweep = now
}

func expire(pods map[string]time.Time, now time.Time, window time.Duration) {
	for uid, seen := range pods {
		if now.Sub(seen) >= window {
			delete(pods, uid)
		}
	}
}
