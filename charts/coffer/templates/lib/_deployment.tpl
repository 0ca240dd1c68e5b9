{{/* A component's Deployment: (dict "ctx" $ "component" "blob"). */}}
{{- define "coffer.lib.deployment" -}}
{{- $ctx := .ctx -}}
{{- $c := .component -}}
{{- $v := index $ctx.Values $c -}}
{{- $spec := include "coffer.spec" . | fromJson -}}
{{- $blobLike := has $c (list "blob" "cdn") -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "coffer.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "coffer.labels" . | nindent 4 }}
spec:
  {{- if not $v.autoscaling.enabled }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # Never drop below the wanted count: old pods drain while new ones serve.
      maxUnavailable: 0
      maxSurge: 25%
  selector:
    matchLabels:
      {{- include "coffer.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "coffer.labels" . | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- include "coffer.checksums" $ctx | nindent 8 }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "coffer.componentName" . }}
      {{- include "coffer.lib.podHardening" $ctx | nindent 6 }}
      # Longer than the service's own drain, so in-flight uploads finish.
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - name: {{ $c }}
          image: {{ include "coffer.image" (dict "ctx" $ctx "service" $spec.image) | quote }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          args:
            {{- toYaml $spec.args | nindent 12 }}
          ports:
            {{- range $spec.ports }}
            - name: {{ .name }}
              containerPort: {{ int .port }}
              protocol: TCP
            {{- end }}
          envFrom:
            - configMapRef:
                name: {{ include "coffer.configName" $ctx }}
          env:
            {{- include "coffer.lib.env" . | nindent 12 }}
          startupProbe:
            httpGet:
              path: /healthz
              port: {{ $spec.serving }}
            {{- toYaml $v.probes.startup | nindent 12 }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: {{ $spec.serving }}
            {{- toYaml $v.probes.liveness | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /readyz
              {{- /* The CDN host has no public /readyz: its pod's internal listener answers it. */}}
              port: {{ $spec.ready | default $spec.serving }}
            {{- toYaml $v.probes.readiness | nindent 12 }}
          {{- if gt (int $v.preStopSleepSeconds) 0 }}
          lifecycle:
            preStop:
              exec:
                command: ["sleep", {{ $v.preStopSleepSeconds | quote }}]
          {{- end }}
          resources:
            {{- include "coffer.lib.containerResources" . | nindent 12 }}
          securityContext:
            {{- toYaml $ctx.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if and $blobLike (eq $ctx.Values.storage.driver "fs") }}
            - name: blobs
              mountPath: {{ $ctx.Values.storage.fs.mountPath }}
            {{- end }}
      volumes:
        {{- include "coffer.lib.tmpVolume" (dict "sizeLimit" $v.tmpSizeLimit) | nindent 8 }}
        {{- if and $blobLike (eq $ctx.Values.storage.driver "fs") }}
        - name: blobs
          persistentVolumeClaim:
            claimName: {{ required "storage.fs.existingClaim is required when storage.driver is fs" $ctx.Values.storage.fs.existingClaim }}
        {{- end }}
      {{- with include "coffer.lib.scheduling" . | trim }}
      {{- . | nindent 6 }}
      {{- end }}
{{- end -}}


{{/*
A component's container resources: its values, plus, with transforms on, a pool of
transforms.workers × transforms.workerMemoryMiB on the memory request and limit for each
listener that starts transform workers in the container: the CDN's (cdn, or blob when
cdn.enabled is false) and blob's internal one (image facts, issue 50). Memory must then be
written in Mi or Gi.
*/}}
{{- define "coffer.lib.containerResources" -}}
{{- $ctx := .ctx -}}
{{- $c := .component -}}
{{- $v := index $ctx.Values $c -}}
{{- $resources := deepCopy $v.resources -}}
{{- $pools := 0 -}}
{{- if eq $c "cdn" -}}{{- $pools = 1 -}}{{- end -}}
{{- if eq $c "blob" -}}{{- $pools = ternary 1 2 $ctx.Values.cdn.enabled -}}{{- end -}}
{{- if and (gt $pools 0) $ctx.Values.transforms.enabled -}}
{{- $extra := mul $pools (int $ctx.Values.transforms.workers) (int $ctx.Values.transforms.workerMemoryMiB) -}}
{{- range $kind := list "requests" "limits" -}}
{{- $block := index $resources $kind -}}
{{- if and $block (hasKey $block "memory") -}}
{{- $mebibytes := include "coffer.lib.mebibytes" (index $block "memory") | int -}}
{{- $_ := set $block "memory" (printf "%dMi" (add $mebibytes $extra)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* A memory quantity in Mi or Gi, as a number of MiB. */}}
{{- define "coffer.lib.mebibytes" -}}
{{- $q := toString . -}}
{{- if hasSuffix "Gi" $q -}}
{{- mul (trimSuffix "Gi" $q | int) 1024 -}}
{{- else if hasSuffix "Mi" $q -}}
{{- trimSuffix "Mi" $q | int -}}
{{- else -}}
{{- fail (printf "memory %s: write it in Mi or Gi (the chart adds the transform workers' memory to it)" $q) -}}
{{- end -}}
{{- end -}}
