{{/*
A service's Deployment and Service. Called with
  (dict "ctx" $ "component" "sender" "svc" .Values.sender "grace" 60 "env" "<yaml list>")
*/}}
{{- define "pacer.deployment" -}}
{{- $ctx := .ctx -}}
{{- $svc := .svc -}}
{{- $component := .component -}}
{{- $prefix := printf "PACER_%s_" (upper $component) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "pacer.fullname" $ctx }}-{{ $component }}
  labels:
    {{- include "pacer.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
spec:
  {{- /* An HPA or a KEDA ScaledObject owns the replica count when enabled. */}}
  {{- if not (or (dig "autoscaling" "enabled" false $svc) (dig "keda" "enabled" false $svc)) }}
  replicas: {{ $svc.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "pacer.selectorLabels" (dict "ctx" $ctx "component" $component) | nindent 6 }}
  strategy:
    type: RollingUpdate
    {{- /* Under hard anti-affinity a surge pod may find no node of its own: replace in place. */}}
    {{- $hard := and (eq $ctx.Values.podAntiAffinity "hard") (not $svc.affinity) }}
    rollingUpdate:
      maxSurge: {{ ternary 0 1 $hard }}
      maxUnavailable: {{ ternary 1 0 $hard }}
  template:
    metadata:
      labels:
        {{- include "pacer.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 8 }}
        {{- with $svc.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $svc.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- if $ctx.Values.serviceAccountName }}
      serviceAccountName: {{ $ctx.Values.serviceAccountName }}
      {{- end }}
      automountServiceAccountToken: false
      # Service links would inject PACER_<SERVICE>_PORT=tcp://… for this chart's Services,
      # which collides with the services' own settings.
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ .grace }}
      {{- with $ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $ctx.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $component }}
          image: {{ include "pacer.image" $ctx }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          # The image's entry point runs pacer-{{ $component }}; it execs, so SIGTERM reaches
          # the service, which finishes the work in hand, commits and exits.
          args: [{{ $component | quote }}]
          {{- with (dig "preStopSleepSeconds" 0 $svc) }}
          # Kubernetes takes the pod out of the Service's endpoints while it sends SIGTERM, and
          # the service stops accepting connections at once: the sleep holds SIGTERM back until
          # kube-proxy and the ingress have stopped routing new requests here.
          lifecycle:
            preStop:
              exec:
                command: ["sleep", {{ . | int | toString | quote }}]
          {{- end }}
          ports:
            - name: ops
              containerPort: {{ $svc.port }}
              protocol: TCP
          env:
            {{- include "pacer.sharedEnv" $ctx | nindent 12 }}
            - name: {{ $prefix }}PORT
              value: {{ $svc.port | int | quote }}
            - name: {{ $prefix }}OPS_HOST
              value: "0.0.0.0"
            - name: {{ $prefix }}LOG_LEVEL
              value: {{ default $ctx.Values.logLevel $svc.logLevel | quote }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $svc.env }}
            {{- include "pacer.mapEnv" . | trim | nindent 12 }}
            {{- end }}
          startupProbe:
            httpGet:
              path: /healthz
              port: ops
            {{- toYaml $ctx.Values.probes.startup | nindent 12 }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: ops
            {{- toYaml $ctx.Values.probes.liveness | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: ops
            {{- toYaml $ctx.Values.probes.readiness | nindent 12 }}
          resources:
            {{- toYaml $svc.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctx.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "pacer.volumeMounts" $ctx | nindent 12 }}
      volumes:
        {{- include "pacer.volumes" $ctx | nindent 8 }}
      {{- with (include "pacer.affinity" (dict "ctx" $ctx "component" $component "svc" $svc)) }}
      affinity:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with $svc.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
# Ops endpoints of the {{ $component }} pods: what the ServiceMonitor scrapes.
apiVersion: v1
kind: Service
metadata:
  name: {{ include "pacer.fullname" $ctx }}-{{ $component }}
  labels:
    {{- include "pacer.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "pacer.selectorLabels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
  ports:
    - name: ops
      port: {{ $svc.port }}
      targetPort: ops
      protocol: TCP
{{- if $svc.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "pacer.fullname" $ctx }}-{{ $component }}
  labels:
    {{- include "pacer.componentLabels" (dict "ctx" $ctx "component" $component) | nindent 4 }}
spec:
  maxUnavailable: {{ $svc.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "pacer.selectorLabels" (dict "ctx" $ctx "component" $component) | nindent 6 }}
{{- end }}
{{- end -}}
