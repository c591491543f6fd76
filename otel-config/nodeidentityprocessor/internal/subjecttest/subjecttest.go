// Package subjecttest holds what the tests of nodeidentity and admission share: a stand-in for what the
// oidc authenticator puts in a request's context (a verified token's attributes), and their counters read back.
package subjecttest

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/client"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// AgentSA is the shipped agent's ServiceAccount as the token's subject names it.
const AgentSA = "system:serviceaccount:node-requests-agent:node-requests-agent"

// Token is a verified token's attributes (client.AuthData).
type Token map[string]any

func (t Token) GetAttribute(name string) any { return t[name] }
func (t Token) GetAttributeNames() []string {
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	return names
}

// Agent is a pod-bound token of the agent's ServiceAccount on node.
func Agent(node string) Token {
	return Token{"subject": AgentSA, "claims.kubernetes.io": map[string]any{"node": map[string]any{"name": node}}}
}

// Context is ctx carrying t as the verified token.
func Context(ctx context.Context, t Token) context.Context {
	return client.NewContext(ctx, client.Info{Auth: t})
}

// Counts is counter name's points read from reader, summed by "reason/node" (the two attributes both
// components count their refusals and drops by).
func Counts(t testing.TB, reader *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
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
