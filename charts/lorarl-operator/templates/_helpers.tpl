{{/* Names, labels and small computed values shared by the templates. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "lorarl-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the objects: fullnameOverride, else "<release>-<name>" (just the release name
when it already contains the chart name). Truncated to 63 characters (the DNS label limit).
*/}}
{{- define "lorarl-operator.fullname" -}}
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

{{/* "name-version" for the helm.sh/chart label ("+" is not allowed in label values). */}}
{{- define "lorarl-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels that select the operator Pods (stable across upgrades: never change them). */}}
{{- define "lorarl-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lorarl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The recommended labels except app.kubernetes.io/component. */}}
{{- define "lorarl-operator.metaLabels" -}}
helm.sh/chart: {{ include "lorarl-operator.chart" . }}
app.kubernetes.io/name: {{ include "lorarl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: lorarl
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels on every object of the operator. */}}
{{- define "lorarl-operator.labels" -}}
{{ include "lorarl-operator.metaLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "lorarl-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lorarl-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "lorarl-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Lease name used for leader election (one per release). */}}
{{- define "lorarl-operator.leaderElectionID" -}}
{{- include "lorarl-operator.fullname" . }}
{{- end }}

{{/*
The full name with a suffix, within the 63-character DNS label limit (Services and Pod
hostnames need it): the full name is shortened, never the suffix. Usage:
include "lorarl-operator.suffixedName" (list . "metrics")
*/}}
{{- define "lorarl-operator.suffixedName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $base := include "lorarl-operator.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{/*
The admission policies' bindings: confined to the watched namespaces of a namespaced install
(several releases side by side), everywhere for watch.allNamespaces.
*/}}
{{- define "lorarl-operator.policyMatchResources" -}}
{{- if not .Values.watch.allNamespaces }}
matchResources:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ .Values.watch.namespaces | toJson }}
{{- end }}
{{- end }}

{{/*
A label map as `lorarl run`'s K=V,... (sorted by key; "" for none).
*/}}
{{- define "lorarl-operator.labelList" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
