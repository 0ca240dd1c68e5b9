{{/*
The container env of a component: (dict "ctx" $ "component" "blob"). Shared, non-secret
settings come from the ConfigMap (envFrom); here are the listener addresses and the secrets
this component needs, and no others.
*/}}
{{- define "coffer.lib.env" -}}
{{- $ctx := .ctx -}}
{{- $c := .component -}}
{{- $v := index $ctx.Values $c -}}
{{ include "coffer.podIdentityEnv" . }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_INTERNAL_TOKEN" "key" "internalToken") }}
{{- if eq $c "edge" }}
- name: COFFER_EDGE_HOST
  value: "0.0.0.0"
- name: COFFER_EDGE_PORT
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" "edge" "port" "http") | quote }}
- name: COFFER_EDGE_INTERNAL_PORT
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" "edge" "port" "internal") | quote }}
- name: COFFER_AUTH_URL
  value: {{ include "coffer.internalUrl" (dict "ctx" $ctx "component" "auth") | quote }}
- name: COFFER_METADATA_URL
  value: {{ include "coffer.internalUrl" (dict "ctx" $ctx "component" "metadata") | quote }}
- name: COFFER_BLOB_URL
  value: {{ include "coffer.internalUrl" (dict "ctx" $ctx "component" "blob") | quote }}
{{- if $ctx.Values.redis.enabled }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_REDIS_URL" "key" "redisUrl") }}
- name: COFFER_REDIS_KEY_PREFIX
  value: {{ $ctx.Values.redis.keyPrefix | default (printf "%s.%s" $ctx.Release.Namespace (include "coffer.fullname" $ctx)) | quote }}
{{- end }}
{{- if $ctx.Values.sweeper.cronJob.enabled }}
# The CronJob sweeps; edge's background loop stays off.
- name: COFFER_SWEEP_INTERVAL_SECONDS
  value: "0"
{{- end }}
{{- else if or (eq $c "auth") (eq $c "metadata") }}
- name: {{ printf "COFFER_%s_HOST" (upper $c) }}
  value: "0.0.0.0"
- name: {{ printf "COFFER_%s_PORT" (upper $c) }}
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" $c "port" "http") | quote }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" (printf "COFFER_%s_DATABASE_URL" (upper $c)) "key" (printf "%sDatabaseUrl" $c)) }}
{{ include "coffer.lib.budgetEnv" (dict "ctx" $ctx) }}
{{- if eq $c "metadata" }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_METADATA_WEBHOOK_SECRET_KEY" "key" "webhookSecretKey") }}
{{- end }}
{{- else if eq $c "webhooks" }}
{{- /* metadata's webhook dispatcher role: its database, the key of the endpoints' secrets */}}
- name: COFFER_METADATA_HOST
  value: "0.0.0.0"
- name: COFFER_METADATA_DISPATCHER_PORT
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" "webhooks" "port" "http") | quote }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_METADATA_DATABASE_URL" "key" "metadataDatabaseUrl") }}
{{ include "coffer.lib.budgetEnv" (dict "ctx" $ctx) }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_METADATA_WEBHOOK_SECRET_KEY" "key" "webhookSecretKey") }}
{{- else }}
{{- /* blob and cdn: the same process, in different roles */}}
- name: COFFER_BLOB_HOST
  value: "0.0.0.0"
- name: COFFER_BLOB_PORT
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" "cdn" "port" "http") | quote }}
- name: COFFER_CDN_HOST
  value: "0.0.0.0"
- name: COFFER_CDN_PORT
  value: {{ include "coffer.port" (dict "ctx" $ctx "component" "cdn" "port" "cdn") | quote }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "COFFER_SIGNING_SECRET" "key" "signingSecret") }}
- name: COFFER_TRANSFORMS
  value: {{ ternary "on" "off" $ctx.Values.transforms.enabled | quote }}
- name: COFFER_CDN_TRANSFORM_WORKERS
  value: {{ $ctx.Values.transforms.workers | toString | quote }}
- name: COFFER_CDN_TRANSFORM_QUEUE
  value: {{ $ctx.Values.transforms.queue | toString | quote }}
- name: COFFER_CDN_TRANSFORM_WORKER_MEMORY_MB
  value: {{ $ctx.Values.transforms.workerMemoryMiB | toString | quote }}
- name: COFFER_CDN_TRANSFORM_MAX_DECODED_MB
  value: {{ $ctx.Values.transforms.maxDecodedMiB | toString | quote }}
{{- with and (eq $c "blob") (include "coffer.clamdUrl" $ctx) }}
- name: COFFER_BLOB_CLAMD_URL
  value: {{ . | quote }}
{{- end }}
{{- if eq $ctx.Values.storage.driver "s3" }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "AWS_ACCESS_KEY_ID" "key" "s3AccessKeyId" "optional" true) }}
{{ include "coffer.secretEnv" (dict "ctx" $ctx "name" "AWS_SECRET_ACCESS_KEY" "key" "s3SecretAccessKey" "optional" true) }}
{{- else }}
- name: COFFER_BLOB_DIR
  value: {{ $ctx.Values.storage.fs.mountPath | quote }}
{{- end }}
{{- end }}
{{- range $name, $value := $v.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}
