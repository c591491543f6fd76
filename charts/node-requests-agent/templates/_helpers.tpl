{{/*
The objects' name: the release name when it already says node-requests-agent (so the default release renders the
names daemonset/ uses), else "<release>-node-requests-agent". The ClusterRole and its binding are cluster-wide, so
two releases never share one.
*/}}
{{- define "nra.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels daemonset/ sets, nothing more: the DaemonSet selector is immutable, so it must never change. */}}
{{- define "nra.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{- define "nra.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- .Values.image.repository -}}
{{- with $tag }}:{{ . }}{{ end -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{- define "nra.tlsDir" -}}/etc/node-requests-agent/otlp-tls{{- end -}}

{{/*
"true" when the PrometheusRule is rendered: prometheusRule.enabled true, or auto where the cluster serves the kind (the
Prometheus Operator's CRDs are installed). true without them refuses the install in one line, before anything is
applied, instead of a half-applied release failing on "no matches for kind".
*/}}
{{- define "nra.prometheusRule" -}}
{{- $served := .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" -}}
{{- $wanted := toString .Values.prometheusRule.enabled -}}
{{- if and (eq $wanted "true") (not $served) -}}
{{- fail "prometheusRule.enabled=true, but the cluster serves no monitoring.coreos.com/v1 PrometheusRule (the Prometheus Operator's CRDs): install them, or set prometheusRule.enabled=auto and load otel-config/prometheus/rules.yaml into Prometheus" -}}
{{- end -}}
{{- if or (eq $wanted "true") (and (eq $wanted "auto") $served) }}true{{ end -}}
{{- end -}}
