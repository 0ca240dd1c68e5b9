{{/* Every resource of one component: (dict "ctx" $ "component" "blob"). */}}
{{- define "coffer.lib.component" -}}
{{- $v := index .ctx.Values .component -}}
{{ include "coffer.lib.serviceAccount" . }}
---
{{ include "coffer.lib.deployment" . }}
---
{{ include "coffer.lib.service" . }}
{{- if $v.autoscaling.enabled }}
---
{{ include "coffer.lib.hpa" . }}
{{- end }}
{{- if $v.pdb.enabled }}
---
{{ include "coffer.lib.pdb" . }}
{{- end }}
{{- if .ctx.Values.networkPolicy.enabled }}
---
{{ include "coffer.lib.networkPolicy" . }}
{{- end }}
{{- if .ctx.Values.metrics.serviceMonitor.enabled }}
---
{{ include "coffer.lib.serviceMonitor" . }}
{{- end }}
{{- end -}}
