{{/* Chart name, truncated for label values. */}}
{{- define "pacer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified release name. Kept to 50 characters so that "<fullname>-<service>" and
"<fullname>-migrate" stay valid object names.
*/}}
{{- define "pacer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pacer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels common to every object. */}}
{{- define "pacer.labels" -}}
helm.sh/chart: {{ include "pacer.chart" . }}
app.kubernetes.io/name: {{ include "pacer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pacer
{{- end -}}

{{/* Selector labels of one component: include "pacer.selectorLabels" (dict "ctx" $ "component" "sender") */}}
{{- define "pacer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pacer.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pacer.componentLabels" -}}
{{ include "pacer.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pacer.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}

{{/* Grace period of the sender: lease TTL + margin, unless set explicitly. */}}
{{- define "pacer.sender.grace" -}}
{{- if not (kindIs "invalid" .Values.sender.terminationGracePeriodSeconds) -}}
{{- .Values.sender.terminationGracePeriodSeconds | int -}}
{{- else -}}
{{- add (ceil .Values.sender.leaseTtlS) .Values.sender.terminationGraceMarginSeconds -}}
{{- end -}}
{{- end -}}

{{/* A helm --timeout longer than the migrate Job's deadline, in whole minutes with a margin of 5
     for its pod's scheduling and image pull: Helm gives up on a hook after --timeout. */}}
{{- define "pacer.hookTimeout" -}}
{{- add (div (add (int .Values.migrations.activeDeadlineSeconds) 59) 60) 5 -}}m
{{- end -}}

{{/* Fail early on missing required values. */}}
{{- define "pacer.validate" -}}
{{- if not .Values.database.urlSecret.name -}}
{{- fail "database.urlSecret.name is required: an existing Secret holding PACER_DATABASE_URL" -}}
{{- end -}}
{{- if not .Values.kafka.bootstrapServers -}}
{{- fail "kafka.bootstrapServers is required (PACER_KAFKA_BOOTSTRAP_SERVERS)" -}}
{{- end -}}
{{- if and (or .Values.sender.enabled .Values.reconciler.enabled) (not .Values.gateway.url) -}}
{{- fail "gateway.url is required (PACER_GATEWAY_URL)" -}}
{{- end -}}
{{- if and .Values.sender.enabled (gt (float64 .Values.sender.gatewayTimeoutS) (divf .Values.sender.leaseTtlS 4)) -}}
{{- fail (printf "sender.gatewayTimeoutS (%v) must be at most sender.leaseTtlS / 4 (%v): the sender refuses to start otherwise" .Values.sender.gatewayTimeoutS (divf .Values.sender.leaseTtlS 4)) -}}
{{- end -}}
{{- if and .Values.sender.enabled .Values.reconciler.enabled (lt (float64 .Values.reconciler.verifyAfterS) (float64 .Values.sender.gatewayTimeoutS)) -}}
{{- fail (printf "reconciler.verifyAfterS (%v) must be at least sender.gatewayTimeoutS (%v): a send still in flight must not be looked up" .Values.reconciler.verifyAfterS .Values.sender.gatewayTimeoutS) -}}
{{- end -}}
{{- range $name := list "control" "intake" }}
{{- $svc := index $.Values $name }}
{{- if and $svc.enabled (gt (int $svc.preStopSleepSeconds) 0) (ge (int $svc.preStopSleepSeconds) (int $svc.terminationGracePeriodSeconds)) }}
{{- fail (printf "%s.terminationGracePeriodSeconds (%v) must be above %s.preStopSleepSeconds (%v): the grace period counts the sleep, and the service needs the rest to finish the requests in hand" $name $svc.terminationGracePeriodSeconds $name $svc.preStopSleepSeconds) -}}
{{- end }}
{{- end }}
{{- if lt (int .Values.kafka.itemCommandPartitions) 1 -}}
{{- fail "kafka.itemCommandPartitions must be at least 1" -}}
{{- end -}}
{{- end -}}

{{/* Environment shared by every container: database, Kafka, topics. */}}
{{- define "pacer.sharedEnv" -}}
- name: PACER_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.urlSecret.name }}
      key: {{ .Values.database.urlSecret.key }}
- name: PACER_KAFKA_BOOTSTRAP_SERVERS
  value: {{ .Values.kafka.bootstrapServers | quote }}
- name: PACER_TOPIC_PREFIX
  value: {{ .Values.kafka.topicPrefix | quote }}
- name: PACER_ITEM_COMMAND_PARTITIONS
  value: {{ .Values.kafka.itemCommandPartitions | int | quote }}
{{- range $topic, $env := dict "requests" "REQUESTS" "commands" "COMMANDS" "outcomes" "OUTCOMES" "callbacks" "CALLBACKS" "deadLetters" "DEAD_LETTERS" }}
- name: PACER_TOPIC_RETENTION_{{ $env }}_HOURS
  value: {{ index $.Values.kafka.retentionHours $topic | int | quote }}
{{- end }}
{{- if .Values.kafka.securitySecret.name }}
- name: PACER_KAFKA_SECURITY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.securitySecret.name }}
      key: {{ .Values.kafka.securitySecret.key }}
{{- else if .Values.kafka.security }}
- name: PACER_KAFKA_SECURITY
  value: {{ .Values.kafka.security | toJson | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* How long a topic keeps its records, from its retention in hours (-1: for ever). */}}
{{- define "pacer.kept" -}}
{{- if lt (int .) 0 -}}kept for ever{{- else -}}kept {{ int . }} h{{- end -}}
{{- end -}}

{{/* Name/value pairs from a map, for a service's `env`. A whole number is written as one
(values files give numbers as floats, which would print 1000000 as 1e+06). */}}
{{- define "pacer.mapEnv" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  {{- if and (kindIs "float64" $v) (eq $v (float64 (int64 $v))) }}
  value: {{ int64 $v | toString | quote }}
  {{- else }}
  value: {{ $v | toString | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Pod anti-affinity of one component: include "pacer.affinity" (dict "ctx" $ "component" "sender" "svc" .Values.sender) */}}
{{- define "pacer.affinity" -}}
{{- if .svc.affinity -}}
{{ toYaml .svc.affinity }}
{{- else if eq .ctx.Values.podAntiAffinity "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "pacer.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- else if eq .ctx.Values.podAntiAffinity "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "pacer.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 10 }}
{{- end -}}
{{- end -}}

{{/* Volumes every pod has: a writable /tmp under a read-only root filesystem. */}}
{{- define "pacer.volumes" -}}
- name: tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "pacer.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The most Postgres connections the release opens: each service's pool at its most replicas
(autoscalers' maxima), and one more pod of each Deployment during a rollout. */}}
{{- define "pacer.connections" -}}
{{- $v := .Values -}}
{{- $parts := list -}}
{{- $total := 0 -}}
{{- $surge := 0 -}}
{{- if $v.planner.enabled -}}
{{- $n := ternary (min (int $v.planner.autoscaling.maxReplicas) 4) (int $v.planner.replicas) $v.planner.autoscaling.enabled -}}
{{- $pool := add 4 (int (get ($v.planner.env | default dict) "PACER_PLANNER_REQUERY_MAX_JOBS" | default 4)) -}}
{{- $parts = append $parts (printf "planner %d×%d" $n $pool) -}}{{- $total = add $total (mul $n $pool) -}}{{- $surge = add $surge $pool -}}
{{- end -}}
{{- if $v.sender.enabled -}}
{{- $n := ternary (min (int $v.sender.keda.maxReplicas) (int $v.kafka.itemCommandPartitions)) (int $v.sender.replicas) $v.sender.keda.enabled -}}
{{- $pool := int $v.sender.dbPoolMax -}}
{{- $parts = append $parts (printf "sender %d×%d" $n $pool) -}}{{- $total = add $total (mul $n $pool) -}}{{- $surge = add $surge $pool -}}
{{- end -}}
{{- if $v.reconciler.enabled -}}
{{- $n := int $v.reconciler.replicas -}}
{{- $parts = append $parts (printf "reconciler %d×9" $n) -}}{{- $total = add $total (mul $n 9) -}}{{- $surge = add $surge 9 -}}
{{- end -}}
{{- if $v.control.enabled -}}
{{- $n := ternary (int $v.control.autoscaling.maxReplicas) (int $v.control.replicas) $v.control.autoscaling.enabled -}}
{{- $pool := int $v.control.dbPoolMax -}}
{{- $parts = append $parts (printf "control %d×%d" $n $pool) -}}{{- $total = add $total (mul $n $pool) -}}{{- $surge = add $surge $pool -}}
{{- end -}}
{{- if $v.intake.enabled -}}
{{- $n := int $v.intake.replicas -}}
{{- $parts = append $parts (printf "intake %d×2" $n) -}}{{- $total = add $total (mul $n 2) -}}{{- $surge = add $surge 2 -}}
{{- end -}}
Postgres connections, at most: {{ $total }} ({{ join ", " $parts }}), {{ add $total $surge }} during a rollout.
Postgres' max_connections must be above that (its default is 100).
{{- end -}}
