{{- /* The injection webhooks, shared by the revision's configuration (webhooks.yaml) and its tags'
(revision-tags.yaml), as the Go mesh's. Each takes the root context, except the rev.* selectors,
which take the revision or tag they select. */}}
{{- define "mesh.injectionWebhook" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: Fail
reinvocationPolicy: Never
clientConfig:
  service:
    name: {{ include "mesh.meshd" . }}
    namespace: {{ .Release.Namespace }}
    path: /inject
    port: 443
rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
{{- end }}

{{- /* The default revision's: namespaces labelled mesh-injection=enabled, and Pods opting in
(sidecar.mesh.io/inject=true) in namespaces labelled with neither mesh-injection nor mesh.io/rev. */}}
{{- define "mesh.defaultWebhooks" -}}
- name: namespace.sidecar-injector.mesh.io
  {{- include "mesh.injectionWebhook" . | nindent 2 }}
  namespaceSelector:
    matchLabels:
      mesh-injection: enabled
  objectSelector:
    matchExpressions:
      - key: sidecar.mesh.io/inject
        operator: NotIn
        values: ["false"]
- name: object.sidecar-injector.mesh.io
  {{- include "mesh.injectionWebhook" . | nindent 2 }}
  namespaceSelector:
    matchExpressions:
      - key: mesh-injection
        operator: DoesNotExist
      - key: mesh.io/rev
        operator: DoesNotExist
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values: [kube-system, kube-public, kube-node-lease]
  objectSelector:
    matchLabels:
      sidecar.mesh.io/inject: "true"
    matchExpressions:
      - key: mesh.io/rev
        operator: DoesNotExist
{{- end }}

{{- /* Namespaces labelled mesh.io/rev=<value>, and Pods labelled with it in unlabelled namespaces. */}}
{{- define "mesh.revNamespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: mesh.io/rev
      operator: In
      values: [{{ . }}]
    - key: mesh-injection
      operator: DoesNotExist
objectSelector:
  matchExpressions:
    - key: sidecar.mesh.io/inject
      operator: NotIn
      values: ["false"]
{{- end }}

{{- define "mesh.revObjectSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: mesh.io/rev
      operator: DoesNotExist
    - key: mesh-injection
      operator: DoesNotExist
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system, kube-public, kube-node-lease]
objectSelector:
  matchExpressions:
    - key: mesh.io/rev
      operator: In
      values: [{{ . }}]
    - key: sidecar.mesh.io/inject
      operator: NotIn
      values: ["false"]
{{- end }}

{{- define "mesh.validationWebhook" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: Fail
clientConfig:
  service:
    name: {{ include "mesh.meshd" . }}
    namespace: {{ .Release.Namespace }}
    path: /validate
    port: 443
rules:
  - apiGroups: [security.mesh.io, networking.mesh.io]
    apiVersions: ["*"]
    operations: [CREATE, UPDATE]
    resources: ["*"]
{{- end }}
