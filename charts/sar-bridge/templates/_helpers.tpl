{{- define "sar-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sar-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sar-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sar-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: interlink
{{- end }}

{{- define "sar-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sar-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: decision-service
{{- end }}

{{- define "sar-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sar-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sar-bridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "sar-bridge.memcachedName" -}}
{{- printf "%s-memcached" (include "sar-bridge.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sar-bridge.hmacSecretName" -}}
{{- default (printf "%s-memcached-hmac" (include "sar-bridge.fullname" .)) .Values.memcached.hmac.existingSecret }}
{{- end }}

{{/* memcached servers the bridge uses: the release's own, or the configured ones. */}}
{{- define "sar-bridge.memcachedServers" -}}
{{- if .Values.memcached.enabled }}
{{- printf "%s.%s.svc:11211" (include "sar-bridge.memcachedName" .) .Release.Namespace }}
{{- else }}
{{- join "," .Values.memcached.servers }}
{{- end }}
{{- end }}

{{/* The distinct API groups the CRDs are made for, sorted, one per line. */}}
{{- define "sar-bridge.crdGroups" -}}
{{- $groups := dict }}
{{- range $tenant, $group := .Values.mappings }}{{ $_ := set $groups $group true }}{{ end }}
{{- range .Values.crds.extraGroups }}{{ $_ := set $groups . true }}{{ end }}
{{- range $g := keys $groups | sortAlpha }}
{{ $g }}
{{- end }}
{{- end }}

{{- /*
The rules of one of the bridge's own RBAC objects in rbac/ (ctx: the root context, file:
its path in the chart). Those files are the one source of the rules: manifests/base and
manifests/admission install them as they are and the post-renderer embeds them, so the
chart takes their rules and gives them the release's names.
*/}}
{{- define "sar-bridge.rbacRules" -}}
{{- $obj := .ctx.Files.Get .file | fromYaml -}}
{{- if not $obj.rules }}
{{- fail (printf "%s: no RBAC rules in the chart (%s)" .file (default "missing file" $obj.Error)) }}
{{- end }}
{{- toYaml $obj.rules }}
{{- end }}
