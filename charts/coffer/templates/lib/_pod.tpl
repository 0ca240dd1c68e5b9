{{/*
Pod-level pieces shared by Deployments, hook Jobs and the CronJob.
*/}}

{{/* The hardened pod spec fields. Takes the root context. */}}
{{- define "coffer.lib.podHardening" -}}
automountServiceAccountToken: false
# Service links would inject e.g. COFFER_AUTH_PORT=tcp://... for a Service named coffer-auth,
# colliding with the services' own COFFER_* settings.
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The writable /tmp every container gets (the root filesystem is read-only). */}}
{{- define "coffer.lib.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .sizeLimit }}
{{- end -}}

{{/* Scheduling of a component: (dict "ctx" $ "component" "blob"). */}}
{{- define "coffer.lib.scheduling" -}}
{{- $ctx := .ctx -}}
{{- $v := index $ctx.Values .component -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range $v.topologySpreadConstraints }}
  - {{- toYaml (merge (dict) . (dict "labelSelector" (dict "matchLabels" (include "coffer.selectorLabels" $ | fromYaml)))) | nindent 4 }}
  {{- end }}
{{- else if $ctx.Values.topologySpread.enabled }}
topologySpreadConstraints:
  {{- range list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - topologyKey: {{ . }}
    maxSkew: {{ $ctx.Values.topologySpread.maxSkew }}
    whenUnsatisfiable: {{ $ctx.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "coffer.selectorLabels" $ | nindent 8 }}
    # Spread each rollout's own pods, not old and new ones together.
    matchLabelKeys:
      - pod-template-hash
  {{- end }}
{{- end }}
{{- end -}}
