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
//   - drops every metric whose name is not in the allow-list, and every point attribute not
//     allowed for that metric.
//
// The contrib transform and filter processors could express most of this in OTTL, but their
// 0.165 modules cannot be built from the Go module proxy here (pkg/expohisto and
// pkg/ottl/contexts/xprofile are not served), and no contrib processor reads a nested claim.
package nodeidentityprocessor

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const typeStr = "nodeidentity"

// Config of the processor. Metrics maps each admitted metric name to the point attribute keys it may carry.
type Config struct {
	ServiceAccount string              `mapstructure:"service_account"`
	ServiceName    string              `mapstructure:"service_name"`
	Metrics        map[string][]string `mapstructure:"metrics"`
}

// Validate is called by the Collector when it loads the configuration.
func (c *Config) Validate() error {
	if c.ServiceAccount == "" {
		return errors.New("service_account is required (the agent's system:serviceaccount:<namespace>:<name>)")
	}
	if len(c.Metrics) == 0 {
		return errors.New("metrics (the allow-list) is required")
	}
	return nil
}

// NewFactory is what the builder's components.go registers.
func NewFactory() processor.Factory {
	return processor.NewFactory(component.MustNewType(typeStr), func() component.Config {
		return &Config{ServiceName: "node-requests-agent"}
	}, processor.WithMetrics(createMetrics, component.StabilityLevelDevelopment))
}

type identity struct {
	cfg     *Config
	allowed map[string]map[string]struct{}
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	c := cfg.(*Config)
	p := &identity{cfg: c, allowed: make(map[string]map[string]struct{}, len(c.Metrics))}
	for name, keys := range c.Metrics {
		set := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			set[k] = struct{}{}
		}
		p.allowed[name] = set
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, p.process,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
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
				keys, ok := p.allowed[m.Name()]
				if !ok {
					return true
				}
				forEachPointAttributes(m, func(a pcommon.Map) {
					a.RemoveIf(func(k string, _ pcommon.Value) bool { _, keep := keys[k]; return !keep })
				})
				return false
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
