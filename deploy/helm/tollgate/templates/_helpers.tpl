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

{{/* The Secret holding the Redis URL: the user's, else the chart's (from redis.url). */}}
{{- define "tollgate.redisSecret" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else if .Values.redis.url -}}
{{- printf "%s-redis" (include "tollgate.fullname" .) -}}
{{- else -}}
{{- fail "redis.enabled needs the Redis URL: set redis.url, or redis.existingSecret naming a Secret that holds it (or redis.enabled=false: each replica counts alone)" -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding admin.token, or nothing when there is no token. */}}
{{- define "tollgate.adminSecret" -}}
{{- if .Values.adminToken.existingSecret -}}
{{- .Values.adminToken.existingSecret -}}
{{- else if .Values.adminToken.value -}}
{{- printf "%s-admin" (include "tollgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Where the interception CA's Secret is mounted. */}}
{{- define "tollgate.caDir" -}}/etc/tollgate-ca{{- end -}}

{{/* Whole seconds of a tollgate duration written in s, m or h (`45s`, `2m`, `1h`; `0`). */}}
{{- define "tollgate.seconds" -}}
{{- $d := toString . -}}
{{- if eq $d "0" -}}0
{{- else if regexMatch "^[0-9]+s$" $d -}}{{ trimSuffix "s" $d }}
{{- else if regexMatch "^[0-9]+m$" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else if regexMatch "^[0-9]+h$" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else -}}
{{- fail (printf "config.shutdown.drain_timeout `%s`: the chart reads it in whole s, m or h (e.g. 45s); write it so, or set shutdown.terminationGracePeriodSeconds" $d) -}}
{{- end -}}
{{- end -}}

{{/* The pod's grace period: longer than preStop and the drain together. */}}
{{- define "tollgate.gracePeriod" -}}
{{- if .Values.shutdown.terminationGracePeriodSeconds -}}
{{- .Values.shutdown.terminationGracePeriodSeconds -}}
{{- else -}}
{{- $drain := "30s" -}}
{{- with .Values.config.shutdown -}}{{- with .drain_timeout -}}{{- $drain = . -}}{{- end -}}{{- end -}}
{{- add (int .Values.shutdown.preStopSeconds) (include "tollgate.seconds" $drain | int) 5 -}}
{{- end -}}
{{- end -}}

{{/* tollgate's config: the values' config, with the store on Redis when enabled, the
admin token from its Secret, and the interception CA from its mount. */}}
{{- define "tollgate.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.redis.enabled -}}
{{- $replicas := .Values.replicaCount -}}
{{- if .Values.autoscaling.enabled -}}{{- $replicas = .Values.autoscaling.maxReplicas -}}{{- end -}}
{{- $_ := set $config "store" (dict "backend" "redis" "url" "${REDIS_URL}" "timeout" .Values.redis.timeout "on_error" .Values.redis.onError "expected_replicas" (int $replicas)) -}}
{{- end -}}
{{- if include "tollgate.adminSecret" . -}}
{{- $admin := deepCopy (default (dict) $config.admin) -}}
{{- $_ := set $admin "token" "${TOLLGATE_ADMIN_TOKEN}" -}}
{{- $_ := set $config "admin" $admin -}}
{{- end -}}
{{- if .Values.intercept.caSecret -}}
{{- $intercept := deepCopy (default (dict) $config.intercept) -}}
{{- $dir := include "tollgate.caDir" . -}}
{{- $_ := set $intercept "ca" (dict "cert_file" (printf "%s/%s" $dir .Values.intercept.certKey) "key_file" (printf "%s/%s" $dir .Values.intercept.keyKey)) -}}
{{- $_ := set $config "intercept" $intercept -}}
{{- else if and $config.intercept $config.intercept.hosts -}}
{{- fail "config.intercept.hosts needs the interception CA: set intercept.caSecret to a Secret made from `tollgate ca init` (values.yaml says how)" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
