{{/* The release's name for everything the chart creates (63 characters at most, a DNS label). */}}
{{- define "ringleader.fullname" -}}
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

{{- define "ringleader.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The selector labels as k=v,k=v (the operator's --network-policies names its own pods with them). */ -}}
{{- define "ringleader.selectorLabelPairs" -}}
{{- $out := list -}}
{{- range $k, $v := (include "ringleader.selectorLabels" . | fromYaml) -}}
{{- $out = append $out (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "ringleader.labels" -}}
{{ include "ringleader.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ringleader.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ringleader.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when the replicas elect a leader: leaderElection.enabled, or by default more than one replica. */}}
{{- define "ringleader.leaderElection" -}}
{{- if kindIs "bool" .Values.leaderElection.enabled -}}
{{- .Values.leaderElection.enabled -}}
{{- else -}}
{{- gt (int .Values.replicaCount) 1 -}}
{{- end -}}
{{- end -}}
