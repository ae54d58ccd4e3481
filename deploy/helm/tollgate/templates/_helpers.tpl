{{- define "tollgate.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tollgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tollgate.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* tollgate's config: the values' config, with the store on Redis when enabled. */}}
{{- define "tollgate.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.redis.enabled -}}
{{- $_ := set $config "store" (dict "backend" "redis" "url" "${REDIS_URL}" "timeout" .Values.redis.timeout "on_error" .Values.redis.onError "expected_replicas" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if .Values.adminToken.existingSecret -}}
{{- $_ := set $config "admin" (dict "token" "${TOLLGATE_ADMIN_TOKEN}") -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
