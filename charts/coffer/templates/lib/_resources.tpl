{{/* Per-component resources besides the Deployment; each takes (dict "ctx" $ "component" "blob"). */}}

{{- define "coffer.lib.serviceAccount" -}}
{{- $v := index .ctx.Values .component -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
  {{- with $v.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
# No Coffer service talks to the Kubernetes API.
automountServiceAccountToken: false
{{- end -}}

{{- define "coffer.lib.service" -}}
{{- $v := index .ctx.Values .component -}}
{{- $spec := include "coffer.spec" . | fromJson -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- include "coffer.selectorLabels" . | nindent 4 }}
  ports:
    {{- range $spec.ports }}
    {{- /* blob's CDN port gets its own Service (coffer.lib.cdnService) */}}
    {{- if not (and (eq $.component "blob") (eq .name "cdn")) }}
    - name: {{ .name }}
      port: {{ int .port }}
      targetPort: {{ .name }}
      protocol: TCP
    {{- end }}
    {{- end }}
{{- end -}}

{{/*
The CDN host's Service when blob serves it (cdn.enabled false): only the CDN port of the
blob pods, so the CDN route can never reach blob's internal API. Takes the root context.
*/}}
{{- define "coffer.lib.cdnService" -}}
{{- $cdn := dict "ctx" . "component" "cdn" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "coffer.componentName" $cdn }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "coffer.labels" $cdn | nindent 4 }}
  {{- with .Values.blob.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ .Values.blob.service.type }}
  selector:
    {{- include "coffer.selectorLabels" (dict "ctx" . "component" "blob") | nindent 4 }}
  ports:
    - name: cdn
      port: 8090
      targetPort: cdn
      protocol: TCP
{{- end -}}

{{- define "coffer.lib.hpa" -}}
{{- $v := index .ctx.Values .component -}}
{{- $a := $v.autoscaling -}}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "coffer.componentName" . }}
  {{- if gt (int $a.minReplicas) (int $a.maxReplicas) }}
  {{- fail (printf "%s.autoscaling: minReplicas (%v) is more than maxReplicas (%v)" .component $a.minReplicas $a.maxReplicas) }}
  {{- end }}
  minReplicas: {{ $a.minReplicas }}
  maxReplicas: {{ $a.maxReplicas }}
  metrics:
    {{- with $a.targetCPUUtilizationPercentage }}
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
    {{- with $a.targetMemoryUtilizationPercentage }}
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
  {{- with $a.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "coffer.lib.pdb" -}}
{{- $v := index .ctx.Values .component -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "coffer.selectorLabels" . | nindent 6 }}
{{- end -}}

{{- define "coffer.lib.serviceMonitor" -}}
{{- $m := .ctx.Values.metrics.serviceMonitor -}}
{{- $spec := include "coffer.spec" . | fromJson -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
    {{- with $m.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "coffer.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames:
      - {{ .ctx.Release.Namespace }}
  endpoints:
    - port: {{ $spec.metrics }}
      path: /metrics
      interval: {{ $m.interval }}
      scrapeTimeout: {{ $m.scrapeTimeout }}
      # Keep the services' own `service` label (edge, blob, ...) instead of renaming it
      # exported_service; the job label still names the Kubernetes Service.
      honorLabels: true
{{- end -}}
