// Package subject reads, from a request's context, the node a verified agent token names.
//
// The admission extension (before it gives a slot or reads a body) and the nodeidentity processor
// (before it writes a point) ask the same question; this is the one answer.
package subject

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/client"
)

// Node is the node named by the verified pod-bound token in ctx, or an error saying why there is none:
// no verified token, a token of another ServiceAccount than serviceAccount, or one that names no node.
func Node(ctx context.Context, serviceAccount string) (string, error) {
	auth := client.FromContext(ctx).Auth
	if auth == nil {
		return "", errors.New("no verified token (is the receiver's oidc authenticator configured?)")
	}
	if sub, _ := auth.GetAttribute("subject").(string); sub != serviceAccount {
		return "", fmt.Errorf("token subject %q is not the agent's ServiceAccount", sub)
	}
	claim, _ := auth.GetAttribute("claims.kubernetes.io").(map[string]any)
	node, _ := claim["node"].(map[string]any)
	name, _ := node["name"].(string)
	if name == "" {
		return "", errors.New("token names no node (not a pod-bound token of a scheduled pod)")
	}
	return name, nil
}
