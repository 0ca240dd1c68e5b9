{{/*
Allow-list NetworkPolicy of a component: (dict "ctx" $ "component" "blob"). The release's
default-deny policy denies everything else. Only edge (and the sweeper CronJob, which is edge's
code) may call auth, metadata and blob; only the ingress peers reach the public listeners.
*/}}
{{- define "coffer.lib.networkPolicy" -}}
{{- $ctx := .ctx -}}
{{- $c := .component -}}
{{- $np := $ctx.Values.networkPolicy -}}
{{- $spec := include "coffer.spec" . | fromJson -}}
{{- $edge := dict "podSelector" (dict "matchLabels" (include "coffer.selectorLabels" (dict "ctx" $ctx "component" "edge") | fromYaml)) -}}
{{- $sweeper := dict "podSelector" (dict "matchLabels" (include "coffer.selectorLabels" (dict "ctx" $ctx "component" "sweeper") | fromYaml)) -}}
{{- $callers := list $edge -}}
{{- if $ctx.Values.sweeper.cronJob.enabled -}}{{- $callers = append $callers $sweeper -}}{{- end -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "coffer.selectorLabels" . | nindent 6 }}
  policyTypes: [Ingress, Egress]
  ingress:
    {{- if and (has $c (list "edge" "cdn")) $np.ingressFrom }}
    # Public traffic, from the ingress controller or gateway only.
    - from:
        {{- toYaml $np.ingressFrom | nindent 8 }}
      ports:
        - port: {{ $spec.serving }}
          protocol: TCP
    {{- end }}
    {{- if and (eq $c "blob") (not $ctx.Values.cdn.enabled) $np.ingressFrom }}
    # blob serves the CDN host itself: public traffic on the CDN port only.
    - from:
        {{- toYaml $np.ingressFrom | nindent 8 }}
      ports:
        - port: cdn
          protocol: TCP
    {{- end }}
    {{- if has $c (list "auth" "metadata" "blob") }}
    # The internal API: edge only (auth answers edge alone; the sweeper needs metadata and blob).
    - from:
        {{- toYaml (ternary (list $edge) $callers (eq $c "auth")) | nindent 8 }}
      ports:
        - port: http
          protocol: TCP
    {{- end }}
    {{- with $np.metricsFrom }}
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - port: {{ $spec.metrics }}
          protocol: TCP
    {{- end }}
  egress:
    {{- include "coffer.egressRule" $np.egress.dns | nindent 4 }}
    {{- if eq $c "edge" }}
    {{- range list "auth" "metadata" "blob" }}
    - to:
        - podSelector:
            matchLabels:
              {{- include "coffer.selectorLabels" (dict "ctx" $ctx "component" .) | nindent 14 }}
      ports:
        - port: {{ include "coffer.port" (dict "ctx" $ctx "component" . "port" "http") }}
          protocol: TCP
    {{- end }}
    {{- if $ctx.Values.redis.enabled }}
    {{- include "coffer.egressRule" $np.egress.redis | nindent 4 }}
    {{- end }}
    {{- end }}
    {{- if has $c (list "auth" "metadata" "webhooks") }}
    {{- include "coffer.egressRule" $np.egress.postgresql | nindent 4 }}
    {{- end }}
    {{- if eq $c "webhooks" }}
    {{- with include "coffer.webhookEgress" $ctx }}
    # Webhook receivers (networkPolicy.egress.webhooks).
    {{- . | nindent 4 }}
    {{- end }}
    {{- end }}
    {{- if and (eq $c "blob") $ctx.Values.clamav.enabled }}
    # The release's own clamd (clamav.enabled).
    - to:
        - podSelector:
            matchLabels:
              {{- include "coffer.selectorLabels" (dict "ctx" $ctx "component" "clamav") | nindent 14 }}
      ports:
        - port: 3310
          protocol: TCP
    {{- else if and (eq $c "blob") $ctx.Values.scanner.clamdUrl }}
    {{- include "coffer.egressRule" $np.egress.clamd | nindent 4 }}
    {{- end }}
    {{- if and (has $c (list "blob" "cdn")) (eq $ctx.Values.storage.driver "s3") }}
    {{- include "coffer.egressRule" $np.egress.s3 | nindent 4 }}
    {{- end }}
    {{- if $ctx.Values.otel.endpoint }}
    {{- include "coffer.egressRule" $np.egress.otlp | nindent 4 }}
    {{- end }}
{{- end -}}
