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
