{{/*
Names, labels and the static facts about each component. Component templates take
(dict "ctx" $ "component" "blob"); the ones taking only the root context say so.
*/}}

{{/* Chart name. Takes the root context. */}}
{{- define "coffer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource name prefix. Takes the root context. */}}
{{- define "coffer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name: <fullname>-<component>. */}}
{{- define "coffer.componentName" -}}
{{- printf "%s-%s" (include "coffer.fullname" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name, instance and component only, so they never change. */}}
{{- define "coffer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "coffer.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of the whole release (no component). Takes the root context. */}}
{{- define "coffer.releaseSelectorLabels" -}}
app.kubernetes.io/name: {{ include "coffer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels that never select: chart, version, manager. Takes the root context. */}}
{{- define "coffer.metaLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: coffer
{{- end -}}

{{/* All labels of a component's resources. */}}
{{- define "coffer.labels" -}}
{{ include "coffer.selectorLabels" . }}
{{ include "coffer.metaLabels" .ctx }}
{{- end -}}

{{/* All labels of a release-wide resource. Takes the root context. */}}
{{- define "coffer.releaseLabels" -}}
{{ include "coffer.releaseSelectorLabels" . }}
{{ include "coffer.metaLabels" . }}
{{- end -}}

{{/* The components that run, in a stable order. Takes the root context; returns JSON. */}}
{{- define "coffer.components" -}}
{{- $list := list "edge" "auth" "metadata" "blob" -}}
{{- if .Values.cdn.enabled -}}{{- $list = append $list "cdn" -}}{{- end -}}
{{- if .Values.webhooks.enabled -}}{{- $list = append $list "webhooks" -}}{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{/*
Static facts of a component, as JSON: its container ports, the port serving its traffic
(probed; "ready", when set, is probed for readiness instead), the port serving /metrics, its
arguments and the image it runs.
*/}}
{{- define "coffer.spec" -}}
{{- $ctx := .ctx -}}
{{- $apart := $ctx.Values.cdn.enabled -}}
{{- $blobPorts := list (dict "name" "http" "port" 8083) -}}
{{- if not $apart -}}{{- $blobPorts = append $blobPorts (dict "name" "cdn" "port" 8090) -}}{{- end -}}
{{- $specs := dict
  "edge" (dict "ports" (list (dict "name" "http" "port" 8080) (dict "name" "internal" "port" 9080)) "serving" "http" "metrics" "internal" "args" (list "serve") "image" "edge")
  "auth" (dict "ports" (list (dict "name" "http" "port" 8081)) "serving" "http" "metrics" "http" "args" (list "serve") "image" "auth")
  "metadata" (dict "ports" (list (dict "name" "http" "port" 8082)) "serving" "http" "metrics" "http" "args" (list "serve") "image" "metadata")
  "blob" (dict "ports" $blobPorts "serving" "http" "metrics" "http" "args" (list "serve" "--role" (ternary "api" "all" $apart)) "image" "blob")
  "cdn" (dict "ports" (list (dict "name" "cdn" "port" 8090) (dict "name" "http" "port" 8083)) "serving" "cdn" "ready" "http" "metrics" "http" "args" (list "serve" "--role" "cdn") "image" "blob")
  "webhooks" (dict "ports" (list (dict "name" "http" "port" 8084)) "serving" "http" "metrics" "http" "args" (list "dispatch") "image" "metadata")
-}}
{{- toJson (index $specs .component) -}}
{{- end -}}

{{/* A component's port number by name: (dict "ctx" $ "component" "edge" "port" "http"). */}}
{{- define "coffer.port" -}}
{{- $spec := include "coffer.spec" . | fromJson -}}
{{- range $spec.ports -}}{{- if eq .name $.port -}}{{- int .port -}}{{- end -}}{{- end -}}
{{- end -}}

{{/* The image of a service: (dict "ctx" $ "service" "blob"). A tag "x@sha256:..." pins a digest. */}}
{{- define "coffer.image" -}}
{{- $ctx := .ctx -}}
{{- $img := index $ctx.Values .service "image" -}}
{{- $tag := $img.tag | default $ctx.Values.image.tag | default $ctx.Chart.AppVersion -}}
{{- $repo := $img.repository -}}
{{- with $ctx.Values.image.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}{{- end -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s@%s" $repo $tag -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret the pods read. Takes the root context. */}}
{{- define "coffer.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "coffer.fullname" .) -}}
{{- end -}}

{{/* Name of the shared ConfigMap. Takes the root context. */}}
{{- define "coffer.configName" -}}
{{- printf "%s-config" (include "coffer.fullname" .) -}}
{{- end -}}

{{/* Public URLs. Take the root context. */}}
{{- define "coffer.baseUrl" -}}
{{- .Values.config.baseUrl | default (printf "%s://%s" .Values.hosts.scheme .Values.hosts.api) | trimSuffix "/" -}}
{{- end -}}
{{- define "coffer.cdnUrl" -}}
{{- .Values.config.cdnUrl | default (printf "%s://%s" .Values.hosts.scheme .Values.hosts.cdn) | trimSuffix "/" -}}
{{- end -}}

{{/* Internal URL of a component's Service: (dict "ctx" $ "component" "auth"). */}}
{{- define "coffer.internalUrl" -}}
{{- printf "http://%s:%s" (include "coffer.componentName" .) (include "coffer.port" (dict "ctx" .ctx "component" .component "port" "http")) -}}
{{- end -}}

{{/* An env entry read from the Secret: (dict "ctx" $ "name" "ENV" "key" "keyName" "optional" false). */}}
{{- define "coffer.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "coffer.secretName" .ctx }}
      key: {{ index .ctx.Values.secrets.keys .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{/*
Pod annotations that roll the pods when configuration changes. The generated tokens are
left out on purpose: they never change once made (lookup keeps them), and a fresh random
value in every render would restart pods on every upgrade. Takes the root context.
*/}}
{{- define "coffer.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ toJson (list .Values.secrets .Values.database .Values.storage.s3.accessKeyId .Values.storage.s3.secretAccessKey .Values.redis) | sha256sum }}
{{- end -}}

{{/* Shared pieces of every pod: the OTEL identity and the Kubernetes downward API. */}}
{{- define "coffer.podIdentityEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_SERVICE_NAME
  value: {{ printf "coffer-%s" .component | quote }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),service.version=%s" .ctx.Chart.AppVersion | quote }}
{{- end -}}

{{/* A NetworkPolicy egress rule from a values block {to, ports}; no `to` means any address. */}}
{{- define "coffer.egressRule" -}}
{{- $ports := list -}}
{{- range .ports -}}{{- $ports = append $ports (dict "port" .port "protocol" (.protocol | default "TCP")) -}}{{- end -}}
{{- $rule := dict "ports" $ports -}}
{{- with .to -}}{{- $_ := set $rule "to" . -}}{{- end -}}
{{- toYaml (list $rule) -}}
{{- end -}}

{{/*
Egress to webhook receivers (networkPolicy.egress.webhooks): `to` and, as ipBlocks, `cidrs`,
on `ports`. Takes the root context; renders nothing unless enabled.
*/}}
{{- define "coffer.webhookEgress" -}}
{{- $w := .Values.networkPolicy.egress.webhooks -}}
{{- if $w.enabled -}}
{{- $to := list -}}
{{- range $w.to -}}{{- $to = append $to . -}}{{- end -}}
{{- range $w.cidrs -}}{{- $to = append $to (dict "ipBlock" (dict "cidr" .)) -}}{{- end -}}
{{- include "coffer.egressRule" (dict "to" $to "ports" $w.ports) -}}
{{- end -}}
{{- end -}}

{{/* COFFER_DASHBOARD_URL: on its own host when hosts.dashboard is set, else under the API. */}}
{{- define "coffer.dashboardUrl" -}}
{{- if .Values.hosts.dashboard -}}
{{- printf "%s://%s/dashboard" .Values.hosts.scheme .Values.hosts.dashboard -}}
{{- else -}}
{{- printf "%s/dashboard" (include "coffer.baseUrl" .) -}}
{{- end -}}
{{- end -}}

{{/* The public routes: (name, host, paths [(path, type)], service, port). The dashboard's
paths go to edge's public port like /api; "/" only exactly, for the redirect to it. */}}
{{- define "coffer.publicRoutes" -}}
{{- $dash := list (dict "path" "/dashboard" "type" "Prefix") (dict "path" "/" "type" "Exact") -}}
{{- $apiPaths := list (dict "path" "/api" "type" "Prefix") -}}
{{- if and .Values.dashboard.enabled (not .Values.hosts.dashboard) -}}
{{- $apiPaths = concat $apiPaths $dash -}}
{{- end -}}
{{- $routes := list
  (dict "name" "api" "host" .Values.hosts.api "paths" $apiPaths "service" "edge" "port" "http" "portNumber" 8080)
  (dict "name" "cdn" "host" .Values.hosts.cdn "paths" (list (dict "path" "/" "type" "Prefix")) "service" "cdn" "port" "cdn" "portNumber" 8090) -}}
{{- if and .Values.dashboard.enabled .Values.hosts.dashboard -}}
{{- $routes = append $routes (dict "name" "dashboard" "host" .Values.hosts.dashboard "paths" $dash "service" "edge" "port" "http" "portNumber" 8080) -}}
{{- end -}}
{{- toJson $routes -}}
{{- end -}}

{{/* The ClamAV image (values clamav.image; a tag "sha256:..." pins a digest). Takes the root context. */}}
{{- define "coffer.clamavImage" -}}
{{- $img := .Values.clamav.image -}}
{{- if hasPrefix "sha256:" $img.tag -}}
{{- printf "%s@%s" $img.repository $img.tag -}}
{{- else -}}
{{- printf "%s:%s" $img.repository $img.tag -}}
{{- end -}}
{{- end -}}

{{/* The volume mounts of a ClamAV container: its configuration (read-only), the signature
database and /tmp (clamd's temporary directory). Takes the configuration's mount path. */}}
{{- define "coffer.clamavMounts" -}}
- name: config
  mountPath: {{ . }}
  readOnly: true
- name: database
  mountPath: /var/lib/clamav
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* COFFER_BLOB_CLAMD_URL: the release's own clamd (clamav.enabled) or scanner.clamdUrl, or
nothing. Takes the root context. */}}
{{- define "coffer.clamdUrl" -}}
{{- if .Values.clamav.enabled -}}
{{- printf "tcp://%s:3310" (include "coffer.componentName" (dict "ctx" . "component" "clamav")) -}}
{{- else -}}
{{- .Values.scanner.clamdUrl -}}
{{- end -}}
{{- end -}}
