{{- /* Per-revision names, as the Go mesh names its objects (istiod-<revision>): the default revision
keeps the plain names, another revision appends -<revision>, so that two revisions install side by
side in one namespace. */}}
{{- define "mesh.suffix" -}}
{{- if ne .Values.revision "default" }}-{{ .Values.revision }}{{ end -}}
{{- end }}

{{- /* meshd, meshd-<revision>: the Deployment, Service, ServiceAccount and PodDisruptionBudget. */}}
{{- define "mesh.meshd" -}}
meshd{{ include "mesh.suffix" . }}
{{- end }}

{{- /* Cluster-scoped names carry the namespace too, unless it is mesh-system (two installs in
different namespaces must not clash either). */}}
{{- define "mesh.nsSuffix" -}}
{{- if ne .Release.Namespace "mesh-system" }}-{{ .Release.Namespace }}{{ end -}}
{{- end }}

{{- define "mesh.injectorName" -}}
mesh-sidecar-injector{{ include "mesh.suffix" . }}{{ include "mesh.nsSuffix" . }}
{{- end }}

{{- define "mesh.validatorName" -}}
meshd{{ include "mesh.suffix" . }}-{{ .Release.Namespace }}
{{- end }}
