{{/*
The connection budget (docs/operations.md, "The connection budget"): (dict "ctx" $) ->
a dict of the pool size every auth, metadata and webhooks pod gets, and the arithmetic.

pods(c)  = n + ceil(n / 4), n = autoscaling.maxReplicas when autoscaling is on, else replicas
           (webhooks: 0 when off): a rolling update's surge (maxSurge 25%) holds connections too
per pod  = pool + reads + writes (webhooks: min(pool, 4) + reads + writes)
total    = pods(auth) × per pod + pods(metadata) × per pod + pods(webhooks) × per webhooks pod
           + 2 (the migration Jobs, one connection each)
pool     = database.budget.poolSize, or the largest (at most 40) that keeps total within
           database.budget.maxConnections. A budget that cannot fit fails the render.
*/}}
{{- define "coffer.lib.podsOf" -}}
{{- $v := index .ctx.Values .component -}}
{{- $n := 0 -}}
{{- if and (eq .component "webhooks") (not $v.enabled) -}}
{{- else if $v.autoscaling.enabled -}}{{- $n = int $v.autoscaling.maxReplicas -}}
{{- else -}}{{- $n = int $v.replicas -}}
{{- end -}}
{{- add $n (div (add $n 3) 4) -}}
{{- end -}}

{{- define "coffer.lib.budget" -}}
{{- $ctx := .ctx -}}
{{- $b := $ctx.Values.database.budget -}}
{{- $a := int (include "coffer.lib.podsOf" (dict "ctx" $ctx "component" "auth")) -}}
{{- $m := int (include "coffer.lib.podsOf" (dict "ctx" $ctx "component" "metadata")) -}}
{{- $w := int (include "coffer.lib.podsOf" (dict "ctx" $ctx "component" "webhooks")) -}}
{{- $loop := add (int $b.readConnections) (int $b.writeConnections) -}}
{{- $max := int $b.maxConnections -}}
{{- $fixed := add (mul (add $a $m $w) $loop) 2 -}}
{{- $pool := int $b.poolSize -}}
{{- if eq $pool 0 -}}
{{- /* Webhooks pods take at most 4 of the pool: first assume the pool is at least 4. */}}
{{- $pool = div (sub (sub $max $fixed) (mul $w 4)) (max (add $a $m) 1) -}}
{{- if lt $pool 4 -}}
{{- $pool = div (sub $max $fixed) (max (add $a $m $w) 1) -}}
{{- end -}}
{{- $pool = min $pool 40 -}}
{{- end -}}
{{- $total := add $fixed (mul (add $a $m) $pool) (mul $w (min $pool 4)) -}}
{{- if lt $pool 1 -}}
{{- fail (printf "database.budget: %d auth, %d metadata and %d webhooks pods need %d connections before any pool (%d event-loop connections each, 2 for the migrations), more than database.budget.maxConnections = %d: raise it (PostgreSQL's max_connections, or put PgBouncer in front), or lower the replicas or the read/write connections" $a $m $w $fixed $loop $max) -}}
{{- end -}}
{{- if gt $total $max -}}
{{- fail (printf "database.budget: %d auth, %d metadata and %d webhooks pods with a pool of %d need %d connections, more than database.budget.maxConnections = %d: lower database.budget.poolSize (0 computes it) or the replicas, or raise maxConnections" $a $m $w $pool $total $max) -}}
{{- end -}}
{{- toJson (dict "pool" $pool "reads" (int $b.readConnections) "writes" (int $b.writeConnections) "auth" $a "metadata" $m "webhooks" $w "total" $total "max" $max "pooler" $b.pooler) -}}
{{- end -}}

{{/* The budget's settings in a pod's env: (dict "ctx" $). */}}
{{- define "coffer.lib.budgetEnv" -}}
{{- $budget := include "coffer.lib.budget" . | fromJson -}}
- name: COFFER_DATABASE_POOL_SIZE
  value: {{ $budget.pool | int | toString | quote }}
- name: COFFER_DATABASE_READ_CONNECTIONS
  value: {{ $budget.reads | int | toString | quote }}
- name: COFFER_DATABASE_WRITE_CONNECTIONS
  value: {{ $budget.writes | int | toString | quote }}
- name: COFFER_DATABASE_POOLER
  value: {{ $budget.pooler | quote }}
{{- end -}}
