#!/bin/sh
# The Collector's TLS without cert-manager: a private CA and a serving certificate for the Collector's
# Service, put where the shipped manifests look for them (docs/deployment.md, TLS on the push path):
#   Secret otel-collector-tls (tls.crt, tls.key) in the Collector's namespace: its OTLP/HTTP receiver serves it;
#   Secret otel-collector-ca (ca.crt) in the agents' namespace: the agents verify the Collector against it.
# Run again before the serving certificate expires: the CA in DIR is kept (the agents need no change), a new
# serving certificate is signed and applied, and the Collector reads it again within its reload_interval (5m).
#
# Usage: make-secrets.sh [--no-apply] [DIR]   (DIR default ./collector-tls; keep ca.key there, or offline)
# Environment: COLLECTOR_NAMESPACE (node-requests-collector), AGENT_NAMESPACE (node-requests-agent), the
# agents' namespace being the Helm release's when installed by the chart; DAYS the serving certificate is
# valid (365); EXTRA_SANS more names, e.g. "DNS:otel.example.com,IP:10.0.0.5"; KUBECTL (kubectl) and its
# KUBECONFIG. Needs openssl and, unless --no-apply, kubectl with the right to write Secrets in both namespaces.
set -eu

apply=1
if [ "${1:-}" = "--no-apply" ]; then apply=0; shift; fi
dir=${1:-./collector-tls}
collector_ns=${COLLECTOR_NAMESPACE:-node-requests-collector}
agent_ns=${AGENT_NAMESPACE:-node-requests-agent}
days=${DAYS:-365}
kubectl=${KUBECTL:-kubectl}
service=otel-collector
sans="DNS:$service.$collector_ns.svc,DNS:$service.$collector_ns.svc.cluster.local,DNS:$service.$collector_ns,DNS:$service"
if [ -n "${EXTRA_SANS:-}" ]; then sans="$sans,$EXTRA_SANS"; fi

mkdir -p "$dir"
umask 077
if [ ! -s "$dir/ca.key" ] || [ ! -s "$dir/ca.crt" ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -sha256 -days 3650 -subj "/CN=node-requests-collector CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.crt"
fi
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/tls.key"
openssl req -new -key "$dir/tls.key" -subj "/CN=$service.$collector_ns.svc" -out "$dir/tls.csr"
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth" "subjectAltName=$sans" > "$dir/tls.ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -sha256 \
  -days "$days" -extfile "$dir/tls.ext" -out "$dir/tls.crt" 2>/dev/null
rm -f "$dir/tls.csr" "$dir/tls.ext"
openssl verify -CAfile "$dir/ca.crt" "$dir/tls.crt" >/dev/null

if [ "$apply" = 1 ]; then
  "$kubectl" -n "$collector_ns" create secret tls otel-collector-tls --cert="$dir/tls.crt" --key="$dir/tls.key" \
    --dry-run=client -o yaml | "$kubectl" apply -f -
  "$kubectl" -n "$agent_ns" create secret generic otel-collector-ca --from-file=ca.crt="$dir/ca.crt" \
    --dry-run=client -o yaml | "$kubectl" apply -f -
fi
echo "serving certificate for $sans in $dir (CA $dir/ca.crt)"
