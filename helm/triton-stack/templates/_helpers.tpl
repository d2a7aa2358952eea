{{/*
Names. Kubernetes names are DNS labels: at most 63 characters.
*/}}
{{- define "triton-stack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "triton-stack.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's object name: "<fullname>-<component>", kept within 63 characters. */}}
{{- define "triton-stack.componentName" -}}
{{- printf "%s-%s" (include "triton-stack.fullname" .ctx | trunc (int (sub 62 (len .component)))) .component | trimSuffix "-" }}
{{- end }}

{{- define "triton-stack.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A label value from an image tag ("24.10-py3" stays as is; "+" is not allowed in labels). */}}
{{- define "triton-stack.labelValue" -}}
{{- . | toString | replace "+" "_" | trunc 63 | trimSuffix "-" | trimSuffix "." }}
{{- end }}

{{/*
Selector labels: stable for the life of a release, because Deployment/StatefulSet selectors are
immutable. Call with (dict "ctx" $ "component" "gateway").
*/}}
{{- define "triton-stack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triton-stack.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Standard labels. The version label is the component's own image tag (Triton 24.10-py3, redis
7.4-alpine, ...), which says more than the chart's appVersion would.
Call with (dict "ctx" $ "component" "triton" "version" "24.10-py3").
*/}}
{{- define "triton-stack.labels" -}}
helm.sh/chart: {{ include "triton-stack.chart" .ctx }}
{{ include "triton-stack.selectorLabels" . }}
app.kubernetes.io/version: {{ include "triton-stack.labelValue" .version | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: triton-stack
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Component shorthands. */}}
{{- define "triton-stack.triton.name" -}}
{{- include "triton-stack.componentName" (dict "ctx" . "component" "triton") }}
{{- end }}

{{- define "triton-stack.triton.labels" -}}
{{- include "triton-stack.labels" (dict "ctx" . "component" "triton" "version" .Values.triton.image.tag) }}
{{- end }}

{{- define "triton-stack.triton.selectorLabels" -}}
{{- include "triton-stack.selectorLabels" (dict "ctx" . "component" "triton") }}
{{- end }}

{{- define "triton-stack.gateway.name" -}}
{{- include "triton-stack.componentName" (dict "ctx" . "component" "gateway") }}
{{- end }}

{{- define "triton-stack.gateway.tag" -}}
{{- default .Chart.AppVersion .Values.gateway.image.tag }}
{{- end }}

{{/* The serving image and the full one (the Dockerfile's two targets), each repository:tag. */}}
{{- define "triton-stack.gateway.image" -}}
{{- printf "%s:%s" .Values.gateway.image.repository (include "triton-stack.gateway.tag" .) }}
{{- end }}

{{- define "triton-stack.gateway.fullImage" -}}
{{- printf "%s:%s" .Values.gateway.fullImage.repository (default .Chart.AppVersion .Values.gateway.fullImage.tag) }}
{{- end }}

{{/* Where the init container writes the compiled feature specs and the gateway reads them. */}}
{{- define "triton-stack.gateway.specsDir" -}}
/specs
{{- end }}

{{- define "triton-stack.gateway.labels" -}}
{{- include "triton-stack.labels" (dict "ctx" . "component" "gateway" "version" (include "triton-stack.gateway.tag" .)) }}
{{- end }}

{{- define "triton-stack.gateway.selectorLabels" -}}
{{- include "triton-stack.selectorLabels" (dict "ctx" . "component" "gateway") }}
{{- end }}

{{- define "triton-stack.redis.name" -}}
{{- include "triton-stack.componentName" (dict "ctx" . "component" "redis") }}
{{- end }}

{{- define "triton-stack.redis.labels" -}}
{{- include "triton-stack.labels" (dict "ctx" . "component" "redis" "version" .Values.redis.image.tag) }}
{{- end }}

{{- define "triton-stack.redis.selectorLabels" -}}
{{- include "triton-stack.selectorLabels" (dict "ctx" . "component" "redis") }}
{{- end }}

{{/*
The InferenceService name; KServe derives the predictor host from it. Knative appends
"-predictor-00001" and more to it, and those names must stay within 63 characters.
*/}}
{{- define "triton-stack.kserve.name" -}}
{{- default (include "triton-stack.fullname" .) .Values.kserve.name | trunc 45 | trimSuffix "-" }}
{{- end }}

{{/* The ServingRuntime the InferenceService names, or "" to let KServe choose by modelFormat. */}}
{{- define "triton-stack.kserve.runtimeName" -}}
{{- if .Values.kserve.runtime.create }}
{{- include "triton-stack.triton.name" . }}
{{- else }}
{{- .Values.kserve.runtime.name }}
{{- end }}
{{- end }}

{{/*
The model repository as a URI KServe's storage initializer understands: the object-store URI as
given, or pvc://<claim>/<subPath> for a volume.
*/}}
{{- define "triton-stack.kserve.storageUri" -}}
{{- if .Values.modelRepository.storageUri }}
{{- .Values.modelRepository.storageUri }}
{{- else }}
{{- printf "pvc://%s/%s" .Values.modelRepository.pvc.claimName .Values.modelRepository.pvc.subPath | trimSuffix "/" }}
{{- end }}
{{- end }}

{{/*
Fail early on value combinations the schema cannot express, so a bad release never reaches the
cluster half-applied.
*/}}
{{- define "triton-stack.validate" -}}
{{- $repo := .Values.modelRepository }}
{{- if and $repo.storageUri $repo.pvc.claimName }}
{{- fail "modelRepository: set either storageUri or pvc.claimName, not both" }}
{{- end }}
{{- if not (or $repo.storageUri $repo.pvc.claimName) }}
{{- fail "modelRepository: set storageUri (s3://... or gs://...) or pvc.claimName" }}
{{- end }}
{{- if and (eq .Values.triton.mode "deployment") $repo.storageUri (not (regexMatch "^(s3|gs)://" $repo.storageUri)) }}
{{- fail "modelRepository.storageUri: deployment mode syncs s3:// or gs:// only (KServe mode takes any URI its storage initializer knows)" }}
{{- end }}
{{- if and (eq .Values.triton.mode "kserve") .Values.kserve.canary.enabled (ne (include "triton-stack.kserve.knative" .) "true") (not .Values.kserve.canary.storageUri) }}
{{- fail "kserve.canary.enabled with deploymentMode Standard/RawDeployment needs kserve.canary.storageUri (the candidate model repository; without Knative there is no newer revision to split traffic to)" }}
{{- end }}
{{- if and (not .Values.redis.enabled) (not .Values.redis.external.url) }}
{{- fail "redis.enabled=false needs redis.external.url (the Feast online store)" }}
{{- end }}
{{- if and .Values.gateway.autoscaling.enabled (gt (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) }}
{{- fail "gateway.autoscaling.minReplicas must not exceed maxReplicas" }}
{{- end }}
{{- $log := .Values.gateway.payloadLog }}
{{- if and $log.url $log.persistence.enabled }}
{{- fail "gateway.payloadLog: set either url (an object store) or persistence.enabled (a volume the chart creates), not both" }}
{{- end }}
{{- if and (or $log.url $log.persistence.enabled) $log.hashKeys (not (or $log.salt.existingSecret $log.existingSecret)) }}
{{- fail "gateway.payloadLog.hashKeys needs a salt: a Secret in payloadLog.salt.existingSecret (or payloadLog.existingSecret) holding it under payloadLog.salt.key" }}
{{- end }}
{{- if and $log.endpointUrl (not (hasPrefix "s3://" $log.url)) }}
{{- fail "gateway.payloadLog.endpointUrl is the endpoint of an S3-compatible store: it needs an s3:// url" }}
{{- end }}
{{- end }}

{{/*
Triton container resources: the values, plus nvidia.com/gpu when the GPU is on. Extended resources
need only a limit; Kubernetes sets the request equal to it.
*/}}
{{- define "triton-stack.triton.resources" -}}
{{- $res := deepCopy (default dict .Values.triton.resources) }}
{{- if .Values.triton.gpu.enabled }}
{{- $limits := deepCopy (default dict $res.limits) }}
{{- $_ := set $limits "nvidia.com/gpu" (int .Values.triton.gpu.count) }}
{{- $_ := set $res "limits" $limits }}
{{- end }}
{{- toYaml $res }}
{{- end }}

{{/* Scheduling for Triton pods: the GPU node selector and tolerations join the general ones. */}}
{{- define "triton-stack.triton.scheduling" -}}
{{- $nodeSelector := deepCopy (default dict .Values.triton.nodeSelector) }}
{{- $tolerations := default list .Values.triton.tolerations }}
{{- if .Values.triton.gpu.enabled }}
{{- $nodeSelector = merge $nodeSelector (default dict .Values.triton.gpu.nodeSelector) }}
{{- $tolerations = concat $tolerations (default list .Values.triton.gpu.tolerations) }}
{{- end }}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.triton.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The tritonserver command line (args to the NGC entrypoint, which sets up CUDA and then execs them).
Call with (dict "ctx" $ "repository" "/models").
*/}}
{{- define "triton-stack.triton.args" -}}
{{- $t := .ctx.Values.triton -}}
- tritonserver
- --model-repository={{ .repository }}
- --model-control-mode={{ $t.modelControlMode }}
{{- if eq $t.modelControlMode "explicit" }}
{{- range $t.loadModels }}
- --load-model={{ . }}
{{- end }}
{{- end }}
- --http-port={{ $t.ports.http }}
- --grpc-port={{ $t.ports.grpc }}
- --metrics-port={{ $t.ports.metrics }}
{{- range $t.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Health probes on Triton's HTTP endpoint (KServe's gRPC serving port cannot answer HTTP). */}}
{{- define "triton-stack.triton.probes" -}}
{{- $t := .Values.triton -}}
startupProbe:
  httpGet:
    path: /v2/health/live
    port: {{ $t.ports.http }}
  periodSeconds: {{ $t.probes.startup.periodSeconds }}
  failureThreshold: {{ $t.probes.startup.failureThreshold }}
readinessProbe:
  httpGet:
    path: /v2/health/ready
    port: {{ $t.ports.http }}
  periodSeconds: {{ $t.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ $t.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ $t.probes.readiness.failureThreshold }}
livenessProbe:
  httpGet:
    path: /v2/health/live
    port: {{ $t.ports.http }}
  periodSeconds: {{ $t.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ $t.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ $t.probes.liveness.failureThreshold }}
{{- end }}

{{/*
The Triton URL the gateway dials. Plain Deployment: Triton's HTTP port (http://, the gateway's
cheaper client per call, gateway/clients/triton_http.py). kserve mode: the predictor's cluster-local
host, where Knative splits traffic between the stable and canary revisions; Knative routes one
port, the ServingRuntime's h2c (gRPC) one, so the gateway speaks gRPC there (grpc://).
*/}}
{{- define "triton-stack.tritonUrl" -}}
{{- if .Values.gateway.tritonUrl }}
{{- .Values.gateway.tritonUrl }}
{{- else if eq .Values.triton.mode "kserve" }}
{{- printf "grpc://%s-predictor.%s.svc.%s:80" (include "triton-stack.kserve.name" .) .Release.Namespace .Values.clusterDomain }}
{{- else }}
{{- printf "http://%s.%s.svc.%s:%d" (include "triton-stack.triton.name" .) .Release.Namespace .Values.clusterDomain (int .Values.triton.ports.http) }}
{{- end }}
{{- end }}

{{- define "triton-stack.redisUrl" -}}
{{- if .Values.redis.enabled }}
{{- /* Feast's connection-string form (host:port[,password=...]), what the gateway passes to Feast */ -}}
{{- printf "%s.%s.svc.%s:%d" (include "triton-stack.redis.name" .) .Release.Namespace .Values.clusterDomain (int .Values.redis.port) }}
{{- else }}
{{- .Values.redis.external.url }}
{{- end }}
{{- end }}

{{/* The Secret holding the gateway's API keys: the chart's own or an existing one. */}}
{{- define "triton-stack.gateway.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "triton-stack.gateway.name" .)) .Values.gateway.auth.existingSecret }}
{{- end }}

{{/*
The Triton container's env entries (triton.env, NAME: value, in name order), or nothing.
*/}}
{{- define "triton-stack.triton.env" -}}
{{- range $name, $value := .Values.triton.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{- define "triton-stack.gateway.feastConfigName" -}}
{{- include "triton-stack.componentName" (dict "ctx" . "component" "gateway-feast") }}
{{- end }}

{{/* Where the payload log's shared volume is mounted (gateway.payloadLog.persistence). */}}
{{- define "triton-stack.gateway.payloadLogDir" -}}
/var/lib/gateway/payload-log
{{- end }}

{{- define "triton-stack.gateway.payloadLogClaim" -}}
{{- include "triton-stack.componentName" (dict "ctx" . "component" "gateway-payload-log") }}
{{- end }}

{{/* Where the pod-local Feast registry lives when gateway.feast.registry is empty (an emptyDir). */}}
{{- define "triton-stack.gateway.registryDir" -}}
/var/lib/feast
{{- end }}

{{/*
The Redis profile as Feast reads it: feature_repo/feature_store.redis.yaml with this release's
project and registry. Feast expands ${REDIS_CONNECTION_STRING} from the environment, which the
pod sets to triton-stack.redisUrl, so the address is written once.
*/}}
{{- define "triton-stack.gateway.feastConfig" -}}
{{- $f := .Values.gateway.feast -}}
project: {{ $f.project }}
provider: local
registry: {{ default (printf "%s/registry.db" (include "triton-stack.gateway.registryDir" .)) $f.registry | quote }}
offline_store:
  type: file
online_store:
  type: redis
  connection_string: "${REDIS_CONNECTION_STRING}"
entity_key_serialization_version: {{ $f.entityKeySerializationVersion }}
{{- end }}

{{/*
What Feast's SDK needs to open the Redis profile of the full image's feature repository: the
repository, the profile, its Redis (Feast's form, host:port), and what the profile's
${REDIS_CONNECTION_STRING} expands to.
*/}}
{{- define "triton-stack.gateway.feastEnv" -}}
- name: GATEWAY_FEATURE_REPO
  value: {{ .Values.gateway.featureRepo | quote }}
- name: GATEWAY_ONLINE_STORE
  value: redis
- name: GATEWAY_REDIS_URL
  value: {{ include "triton-stack.redisUrl" . | quote }}
- name: REDIS_CONNECTION_STRING
  value: {{ include "triton-stack.redisUrl" . | quote }}
{{- end }}

{{/* The gateway's Feast mounts: the Redis profile over the image's file, and the local registry. */}}
{{- define "triton-stack.gateway.feastMounts" -}}
- name: feast-config
  mountPath: {{ printf "%s/feature_store.redis.yaml" (trimSuffix "/" .ctx.Values.gateway.featureRepo) }}
  subPath: feature_store.redis.yaml
  readOnly: true
{{- if .local }}
- name: feast-registry
  mountPath: {{ include "triton-stack.gateway.registryDir" .ctx }}
{{- end }}
{{- end }}

{{/*
An InferenceService predictor (the stable one, or spec.canary's) serving a model repository URI.
Call with (dict "ctx" $ "storageUri" "s3://...").
*/}}
{{- define "triton-stack.kserve.predictor" -}}
{{- $c := .ctx }}
{{- $storageUri := .storageUri }}
{{- $runtime := include "triton-stack.kserve.runtimeName" $c -}}
minReplicas: {{ $c.Values.kserve.minReplicas }}
maxReplicas: {{ $c.Values.kserve.maxReplicas }}
{{- if and $c.Values.kserve.canary.enabled (include "triton-stack.kserve.knative" $c | eq "true") }}
# KServe splits traffic between the last fully rolled-out revision and this one. Promote by
# removing the field (canary.enabled=false), roll back by setting it to 0.
canaryTrafficPercent: {{ $c.Values.kserve.canary.trafficPercent }}
{{- end }}
# Pod labels: the NetworkPolicy and the metrics Service select the predictor pods by these.
labels:
  {{- include "triton-stack.triton.labels" $c | nindent 2 }}
{{- with $c.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.Values.triton.serviceAccountName }}
# KServe's storage initializer takes bucket credentials from this ServiceAccount.
serviceAccountName: {{ . }}
{{- end }}
{{- with include "triton-stack.triton.scheduling" $c | trim }}
{{- . | nindent 0 }}
{{- end }}
model:
  # KServe's serving container name (the canary's schema requires it; the same on both).
  name: kserve-container
  modelFormat:
    name: {{ $c.Values.kserve.modelFormat }}
  {{- with $runtime }}
  runtime: {{ . }}
  {{- end }}
  protocolVersion: grpc-v2
  storageUri: {{ $storageUri | quote }}
  {{- with include "triton-stack.triton.env" $c | trim }}
  # Also on the predictor, not only in the chart's ServingRuntime: with someone else's runtime
  # this is the only place it can go (KServe merges it into the serving container).
  env:
    {{- . | nindent 4 }}
  {{- end }}
  {{- if not $c.Values.kserve.runtime.create }}
  # Someone else's runtime: pin the Triton release through its image tag and add our flags
  # (KServe appends predictor args to the runtime's own).
  runtimeVersion: {{ $c.Values.triton.image.tag | quote }}
  args:
    - --model-control-mode={{ $c.Values.triton.modelControlMode }}
    {{- if eq $c.Values.triton.modelControlMode "explicit" }}
    {{- range $c.Values.triton.loadModels }}
    - --load-model={{ . }}
    {{- end }}
    {{- end }}
    {{- range $c.Values.triton.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  {{- end }}
  resources:
    {{- include "triton-stack.triton.resources" $c | nindent 4 }}
{{- end }}

{{/* "true" where the InferenceService runs on Knative (Serverless, or Knative as KServe >= 0.15 calls it). */}}
{{- define "triton-stack.kserve.knative" -}}
{{- has .Values.kserve.deploymentMode (list "Serverless" "Knative") }}
{{- end }}

{{/* The Service Prometheus scrapes Triton through: its own in deployment mode, a headless one in kserve mode. */}}
{{- define "triton-stack.triton.metricsService" -}}
{{- if eq .Values.triton.mode "kserve" }}
{{- printf "%s-metrics" (include "triton-stack.triton.name" .) }}
{{- else }}
{{- include "triton-stack.triton.name" . }}
{{- end }}
{{- end }}

{{/*
Monitoring objects (PrometheusRule, dashboard ConfigMap) belong to no workload: component
"monitoring", versioned with the chart that ships them.
*/}}
{{- define "triton-stack.monitoring.labels" -}}
{{- include "triton-stack.labels" (dict "ctx" . "component" "monitoring" "version" .Chart.Version) }}
{{- end }}

{{/*
PromQL label matchers for one component's series: the user's, else the release namespace and the
job Prometheus Operator gives a ServiceMonitor target (the Service name). Call with
(dict "ctx" $ "component" "gateway").
*/}}
{{- define "triton-stack.monitoring.selector" -}}
{{- $c := .ctx }}
{{- $user := get $c.Values.monitoring.prometheusRule.selectors .component }}
{{- if $user }}
{{- $user }}
{{- else }}
{{- $service := ternary (include "triton-stack.gateway.name" $c) (include "triton-stack.triton.metricsService" $c) (eq .component "gateway") }}
{{- printf "namespace=%q, job=%q" $c.Release.Namespace $service }}
{{- end }}
{{- end }}
