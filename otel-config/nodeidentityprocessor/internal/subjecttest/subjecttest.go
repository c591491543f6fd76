// Package subjecttest stands in, for the tests of nodeidentity and admission, for what the oidc
// authenticator puts in a request's context: a verified token's attributes.
package subjecttest

import (
	"context"

	"go.opentelemetry.io/collector/client"
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
