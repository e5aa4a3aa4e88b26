{{- /*
The objects of config/default, read from the project's config/ (files/config)
and changed as config/default's kustomization changes them: the resources of
each directory it lists, in one namespace, the operator's ClusterRoles and
their bindings made Roles there, each operator watching its own namespace, and
the operator image of config/manager's images: entry under .Values.image.
tests/install/test_helm_chart.py compares the two renderings object for object.
*/ -}}
{{- $namespace := .Values.namespace.name | default .Release.Namespace -}}
{{- $clusterScoped := list "Namespace" "CustomResourceDefinition" "ClusterRole" "ClusterRoleBinding" "ValidatingAdmissionPolicy" "ValidatingAdmissionPolicyBinding" -}}
{{- $registry := trimSuffix "/" .Values.image.registry -}}
{{- $default := .Files.Get "files/config/default/kustomization.yaml" | fromYaml -}}
{{- $served := list -}}
{{- range $dir := $default.resources -}}
{{- $base := clean (printf "files/config/default/%s" $dir) -}}
{{- $kustomization := $.Files.Get (printf "%s/kustomization.yaml" $base) | fromYaml -}}
{{- if not $kustomization.resources -}}
{{- fail (printf "%s/kustomization.yaml: no resources (the chart reads the files it lists)" $base) -}}
{{- end -}}
{{- range $key, $_ := omit $kustomization "apiVersion" "kind" "resources" "images" -}}
{{- fail (printf "%s/kustomization.yaml: %s is not something the chart applies" $base $key) -}}
{{- end -}}
{{- $images := dict -}}
{{- range $kustomization.images -}}
{{- $_ := set $images .name (printf "%s/%s" $registry (base .newName)) -}}
{{- end -}}
{{- range $file := $kustomization.resources -}}
{{- $text := $.Files.Get (printf "%s/%s" $base $file) -}}
{{- if not $text -}}
{{- fail (printf "%s/%s: not a file of the chart (a directory is not read)" $base $file) -}}
{{- end -}}
{{- range $document := regexSplit "(?m)^---[ \\t]*$" $text -1 -}}
{{- $object := $document | fromYaml -}}
{{- if $object.Error -}}
{{- fail (printf "%s/%s: %s" $base $file $object.Error) -}}
{{- end -}}
{{- if $object.kind -}}
{{- $metadata := $object.metadata -}}
{{- $keep := true -}}
{{- if and (eq $object.kind "ClusterRole") (hasPrefix "exporterset-operator" $metadata.name) -}}
{{- $_ := set $object "kind" "Role" -}}
{{- end -}}
{{- if and (eq $object.kind "ClusterRoleBinding") (eq $metadata.name "exporterset-operator") -}}
{{- $_ := set $object "kind" "RoleBinding" -}}
{{- $_ := set $object.roleRef "kind" "Role" -}}
{{- end -}}
{{- if and (eq $object.kind "RoleBinding") (hasPrefix "exporterset-operator-pool-" $metadata.name) -}}
{{- $_ := set $object.roleRef "kind" "Role" -}}
{{- end -}}
{{- if eq $object.kind "Namespace" -}}
{{- $_ := set $metadata "name" $namespace -}}
{{- $keep = $.Values.namespace.create -}}
{{- else if not (has $object.kind $clusterScoped) -}}
{{- $_ := set $metadata "namespace" $namespace -}}
{{- end -}}
{{- range $object.subjects -}}
{{- if eq .kind "ServiceAccount" -}}
{{- $_ := set . "namespace" $namespace -}}
{{- end -}}
{{- end -}}
{{- if eq $object.kind "Deployment" -}}
{{- $spec := $object.spec.template.spec -}}
{{- $provisioner := "" -}}
{{- range (index $spec.containers 0).args -}}
{{- if hasPrefix "--provisioner=" . -}}
{{- $provisioner = trimPrefix "--provisioner=" . -}}
{{- end -}}
{{- end -}}
{{- $served = append $served $provisioner -}}
{{- $keep = has $provisioner $.Values.provisioners -}}
{{- range $spec.containers -}}
{{- $container := . -}}
{{- if hasKey $images .image -}}
{{- $image := index $images .image -}}
{{- $image = ternary (printf "%s@%s" $image $.Values.image.digest) (printf "%s:%s" $image ($.Values.image.tag | default $.Chart.AppVersion)) (ne $.Values.image.digest "") -}}
{{- $_ := set $container "image" $image -}}
{{- $_ := set $container "imagePullPolicy" $.Values.image.pullPolicy -}}
{{- end -}}
{{- range .env -}}
{{- if eq .name "IMAGE_REGISTRY" -}}
{{- $_ := set . "value" $registry -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $first := index $spec.containers 0 -}}
{{- $_ := set $first "env" (append ($first.env | default list) (dict "name" "WATCH_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))) -}}
{{- end }}
{{- if $keep }}
---
{{ toYaml $object }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $.Values.provisioners -}}
{{- if not (has . $served) -}}
{{- fail (printf "provisioners: no Deployment serves %s (config/manager serves %s)" . (join ", " $served)) -}}
{{- end -}}
{{- end -}}
