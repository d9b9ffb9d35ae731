{{/* Chart name, truncated to the 63 characters Kubernetes allows in names. */}}
{{- define "tubemq-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "tubemq-gateway.fullname" -}}
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

{{- define "tubemq-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tubemq-gateway.labels" -}}
helm.sh/chart: {{ include "tubemq-gateway.chart" . }}
{{ include "tubemq-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tubemq-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tubemq-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tubemq-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tubemq-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding credentials: the user's own, or the one this chart renders from auth.env. */}}
{{- define "tubemq-gateway.secretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.env }}
{{- include "tubemq-gateway.fullname" . }}
{{- end }}
{{- end }}

{{/* The pod's termination budget: preStop sleep + the gateway's own grace period + a margin. */}}
{{- define "tubemq-gateway.terminationGracePeriod" -}}
{{- add (int .Values.shutdown.preStopSleepSeconds) (int .Values.shutdown.gracePeriodSeconds) (int .Values.shutdown.marginSeconds) }}
{{- end }}

{{/* PromQL selector of this release's gateway pods, as scraped through the ServiceMonitor (job = Service name). */}}
{{- define "tubemq-gateway.promSelector" -}}
namespace="{{ .Release.Namespace }}",job="{{ include "tubemq-gateway.fullname" . }}"
{{- end }}

{{/* The Secret with what the chart generates (consumer id secret, admin API key, API keys file). */}}
{{- define "tubemq-gateway.generatedSecretName" -}}
{{- printf "%s-generated" (include "tubemq-gateway.fullname" . | trunc 53 | trimSuffix "-") }}
{{- end }}

{{/* The Secret holding the API keys file (key api-keys.json), or nothing when there is none. */}}
{{- define "tubemq-gateway.apiKeysSecret" -}}
{{- if .Values.auth.apiKeys.existingSecret }}
{{- .Values.auth.apiKeys.existingSecret }}
{{- else if .Values.auth.adminKey.enabled }}
{{- .Values.auth.adminKey.existingSecret | default (include "tubemq-gateway.generatedSecretName" .) }}
{{- end }}
{{- end }}

{{/* http or https: the scheme of the gateway's listeners. */}}
{{- define "tubemq-gateway.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* The largest number of pods serving the release. */}}
{{- define "tubemq-gateway.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/* The image reference: repository@digest when image.digest is set (the tag is then ignored), else repository:tag. */}}
{{- define "tubemq-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The pod's affinity: the values' own, plus a preferred anti-affinity on the node when spread.enabled and
they set no podAntiAffinity. Rendered as YAML (a map, possibly empty). */}}
{{- define "tubemq-gateway.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- if and .Values.spread.enabled (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "tubemq-gateway.selectorLabels" . | fromYaml)) }}
{{- $preferred := list (dict "weight" (int .Values.spread.antiAffinityWeight) "podAffinityTerm" $term) }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" $preferred) }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{/* The pod's topology spread constraints: the values' own, else (spread.enabled) one ScheduleAnyway constraint
per key of spread.topologyKeys. Rendered as a YAML list. */}}
{{- define "tubemq-gateway.topologySpreadConstraints" -}}
{{- if .Values.topologySpreadConstraints }}
{{- toYaml .Values.topologySpreadConstraints }}
{{- else if .Values.spread.enabled }}
{{- $selector := include "tubemq-gateway.selectorLabels" . | fromYaml }}
{{- $constraints := list }}
{{- range .Values.spread.topologyKeys }}
{{- $constraints = append $constraints (dict "maxSkew" (int $.Values.spread.maxSkew) "topologyKey" . "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" (dict "matchLabels" $selector)) }}
{{- end }}
{{- toYaml $constraints }}
{{- else }}
{{- toYaml list }}
{{- end }}
{{- end }}

{{/* The smallest number of pods serving the release. */}}
{{- define "tubemq-gateway.minReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.minReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/* An Ingress's tls and rules: ingress (hosts, tls), service (name) and port (number). */}}
{{- define "tubemq-gateway.ingressRules" -}}
{{- $service := .service }}
{{- $port := .port }}
{{- with .ingress.tls }}
tls:
  {{- range . }}
  - hosts:
      {{- range .hosts }}
      - {{ . | quote }}
      {{- end }}
    secretName: {{ .secretName }}
  {{- end }}
{{- end }}
rules:
  {{- range .ingress.hosts }}
  - host: {{ .host | quote }}
    http:
      paths:
        {{- range .paths }}
        - path: {{ .path }}
          pathType: {{ .pathType }}
          backend:
            service:
              name: {{ $service }}
              port:
                number: {{ $port }}
        {{- end }}
  {{- end }}
{{- end }}

{{/* Labels of the helm test pod: another name, so that no selector of the release's pods matches it. */}}
{{- define "tubemq-gateway.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tubemq-gateway.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tubemq-gateway.testLabels" -}}
helm.sh/chart: {{ include "tubemq-gateway.chart" . }}
{{ include "tubemq-gateway.testSelectorLabels" . }}
app.kubernetes.io/component: test
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Worker processes per pod: .Values.workers, or (0) one per CPU of the container's CPU limit (its request
without a limit), rounded up; 0 when neither is set (the gateway then counts the CPUs it may use). */}}
{{- define "tubemq-gateway.workers" -}}
{{- $cpu := "" -}}
{{- with .Values.resources -}}
{{- $cpu = toString (dig "limits" "cpu" (dig "requests" "cpu" "" .) .) -}}
{{- end -}}
{{- if .Values.workers -}}
{{- .Values.workers -}}
{{- else if not $cpu -}}
0
{{- else if hasSuffix "m" $cpu -}}
{{- max 1 (div (add (atoi (trimSuffix "m" $cpu)) 999) 1000) -}}
{{- else -}}
{{- max 1 (ceil (float64 $cpu) | int) -}}
{{- end -}}
{{- end }}

{{/* "true" when the chart generates the admin API key: auth.adminKey.enabled, and no Secret of yours holds
the keys (auth.adminKey.existingSecret, auth.apiKeys.existingSecret); else empty. */}}
{{- define "tubemq-gateway.generatesAdminKey" -}}
{{- if and .Values.auth.adminKey.enabled (not .Values.auth.adminKey.existingSecret) (not .Values.auth.apiKeys.existingSecret) }}true{{ end }}
{{- end }}

{{/* The Secret holding the admin API key's clear text (key admin-api-key), or nothing when there is none. */}}
{{- define "tubemq-gateway.adminKeySecret" -}}
{{- if and .Values.auth.adminKey.enabled (not .Values.auth.apiKeys.existingSecret) }}
{{- .Values.auth.adminKey.existingSecret | default (include "tubemq-gateway.generatedSecretName" .) }}
{{- end }}
{{- end }}

{{/* The `helm test` pod's credential as YAML: `{}` in auth.mode open (it sends none); with auth.mode
required, the Secret and key of tests.apiKeySecret, else of the admin key (generated, or
auth.adminKey.existingSecret's); nothing when tests.enabled is off or no key can be had, and then no test pod
renders (templates/tests/smoke-test.yaml) and the NOTES offer no `helm test`. */}}
{{- define "tubemq-gateway.smokeTestKeyRef" -}}
{{- if .Values.tests.enabled }}
{{- $required := eq .Values.auth.mode "required" }}
{{- if not $required }}
{}
{{- else if .Values.tests.apiKeySecret.name }}
{{- if not .Values.tests.apiKeySecret.key }}
{{- fail "tests.apiKeySecret.name needs tests.apiKeySecret.key: the key of the Secret holding the API key" }}
{{- end }}
name: {{ .Values.tests.apiKeySecret.name }}
key: {{ .Values.tests.apiKeySecret.key }}
{{- else if include "tubemq-gateway.adminKeySecret" . }}
name: {{ include "tubemq-gateway.adminKeySecret" . }}
key: admin-api-key
{{- end }}
{{- end }}
{{- end }}

{{/* The consumer id secret's Secret and key: forwarding.idSecret's, else the generated one. */}}
{{- define "tubemq-gateway.idSecretRef" -}}
{{- with .Values.forwarding.idSecret.existingSecret }}
name: {{ . }}
key: {{ $.Values.forwarding.idSecret.key | default "consumer-id-secret" }}
{{- else }}
name: {{ include "tubemq-gateway.generatedSecretName" . }}
key: consumer-id-secret
{{- end }}
{{- end }}

{{/* The ServiceMonitor's tlsConfig with tls.enabled: Prometheus verifies the pod's certificate against a CA
(metrics.serviceMonitor.tls.caSecret, else ca.crt of tls.secretName) for a name it carries (tls.serverName,
else the Service's DNS name): pod certificates rarely name the pod IPs Prometheus scrapes, so the name is
checked instead of the address. insecureSkipVerify only when asked for. */}}
{{- define "tubemq-gateway.serviceMonitorTls" -}}
{{- $t := .Values.metrics.serviceMonitor.tls -}}
{{- if $t.insecureSkipVerify -}}
insecureSkipVerify: true
{{- else -}}
{{- $ca := $t.caSecret.name | default (ternary .Values.tls.secretName "" .Values.tls.caCert) -}}
{{- if not $ca -}}
{{- fail "metrics.serviceMonitor with tls.enabled needs a CA to verify the pods' certificate: tls.caCert (ca.crt in tls.secretName) or metrics.serviceMonitor.tls.caSecret.name" -}}
{{- end -}}
ca:
  secret:
    name: {{ $ca }}
    key: {{ $t.caSecret.key | default "ca.crt" }}
serverName: {{ $t.serverName | default (printf "%s.%s.svc" (include "tubemq-gateway.fullname" .) .Release.Namespace) }}
insecureSkipVerify: false
{{- end -}}
{{- end }}
