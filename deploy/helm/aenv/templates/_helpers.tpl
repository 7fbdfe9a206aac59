{{- define "aenv.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "aenv.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "gateway") */}}
{{- define "aenv.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "aenv.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /* One name for every member: the headless Service resolves to all their addresses, which
gRPC's DNS resolver re-reads after a failure, so the services fail over between members. */ -}}
{{- define "aenv.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{ include "aenv.fullname" . }}-etcd:2379
{{- else -}}
{{ required "etcd.external.endpoints is required when etcd.enabled=false" .Values.etcd.external.endpoints }}
{{- end -}}
{{- end -}}

{{- /* member-0=http://<fullname>-etcd-0.<fullname>-etcd:2380,... for etcd.replicas members */ -}}
{{- define "aenv.etcdInitialCluster" -}}
{{- $name := printf "%s-etcd" (include "aenv.fullname" .) -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $members = append $members (printf "%s-%d=http://%s-%d.%s:2380" $name $i $name $i $name) -}}
{{- end -}}
{{ join "," $members }}
{{- end -}}

{{- /* Every scheduler replica by its stable name: only the leader places, and the gateway asks
the replicas in turn (a Service's one address would pin it to whichever pod it reached). */ -}}
{{- define "aenv.schedulerAddresses" -}}
{{- $name := printf "%s-scheduler" (include "aenv.fullname" .) -}}
{{- $addresses := list -}}
{{- range $i := until (int .Values.scheduler.replicas) -}}
{{- $addresses = append $addresses (printf "%s-%d.%s:%d" $name $i $name (int $.Values.scheduler.port)) -}}
{{- end -}}
{{- join "," $addresses -}}
{{- end -}}

{{- define "aenv.apiKeySecret" -}}
{{ .Values.gateway.apiKey.existingSecret | default (printf "%s-api-key" (include "aenv.fullname" .)) }}
{{- end -}}

{{- define "aenv.secretsKeySecret" -}}
{{ .Values.secretsKey.existingSecret | default (printf "%s-secrets-key" (include "aenv.fullname" .)) }}
{{- end -}}

{{- define "aenv.s3Secret" -}}
{{ .Values.snapstore.s3.existingSecret | default (printf "%s-snapstore-s3" (include "aenv.fullname" .)) }}
{{- end -}}

{{/* Container basics shared by every aenv service: (dict "root" $ "svc" "gateway") */}}
{{- define "aenv.serviceContainer" -}}
name: {{ .svc }}
image: {{ include "aenv.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
command: ["python", "-m", "aenv_{{ .svc }}"]
envFrom:
  - configMapRef:
      name: {{ include "aenv.fullname" .root }}-config
{{- end -}}

{{/* A name: value map as container env entries. */}}
{{- define "aenv.envEntries" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{- define "aenv.podSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
  readOnlyRootFilesystem: true
{{- end -}}
