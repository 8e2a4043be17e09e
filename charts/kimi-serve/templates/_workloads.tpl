{{/* kimi.workloads: {"objects", "scalers"}: the engine groups' objects (render/k8s.py, k8s_kv.py, k8s_fleet.py: a KV
store's master, store and instances with their Services, the engines, the router; each group's cache claim), with
an autoscaler's copies and rollout laid over them, and the autoscalers and PodDisruptionBudgets of those groups
(kimi.autoscaling); drawn once per render (workloads.yaml and autoscaling.yaml draw from it) */}}
{{- define "kimi.workloads" -}}
{{- if not (hasKey . "kimiWorkloads") }}{{ $_ := set . "kimiWorkloads" (include "kimi.drawWorkloads" .) }}{{ end -}}
{{- .kimiWorkloads -}}
{{- end -}}

{{- define "kimi.drawWorkloads" -}}
{{- $f := .Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $c := include "kimi.ctx" . | fromJson -}}
{{- $objects := list -}}{{- $scalers := list -}}
{{- if $c.ok -}}
{{- $o := include "kimi.operate" . | fromJson -}}
{{- $claimSpec := include "kimi.claimSpec" (list . false) | fromJson -}}
{{- /* one Deployment's claim, held by two pods at once with copies or an autoscaler's surge (k8s.shared_claim) */ -}}
{{- $sharedSpec := include "kimi.claimSpec" (list . (or (gt (int $o.replicas) 1) (ne $o.autoscaling "off"))) | fromJson -}}
{{- range $g := $c.groups -}}
  {{- /* plan's objects of the group's kind (the table's groups: its workload, a KV master's Service, a StatefulSet's
        headless Service), filled with the group's metadata, pod templates, sizes and claim templates */ -}}
  {{- $p := first $g.procs -}}
  {{- $claim := ternary "" ($g.claim | default "") (not (empty $c.cacheVolume)) -}}
  {{- if $claim -}}
    {{- $objects = append $objects (dict "apiVersion" "v1" "kind" "PersistentVolumeClaim" "metadata" (include "kimi.meta" (list $c $claim "cache") | fromJson) "spec" (deepCopy $sharedSpec)) -}}
  {{- end -}}
  {{- $lws := eq $g.kind "LeaderWorkerSet" -}}
  {{- $fills := dict "replicas" (int (hasKey $g "replicas" | ternary $g.replicas 1)) "size" (int (hasKey $g "size" | ternary $g.size 1)) "port" $p.port "group" $g.name
        "meta" (include "kimi.meta" (list $c $g.name $p.role (ternary dict (include "kimi.procSkips" (list $f $c $p) | fromJson) $lws)) | fromJson)
        "service_meta" (include "kimi.meta" (list $c $g.name $p.role) | fromJson) "pod_labels" (include "kimi.labels" (list $c $p.role) | fromJson)
        "claims" (list (dict "metadata" (dict "name" $d.volumes.cache) "spec" (deepCopy $claimSpec))) -}}
  {{- if not $lws }}{{ $_ := set $fills "pod" (include "kimi.pod" (list $ $c $p $claim) | fromJson) -}}
  {{- else if gt (len $g.procs) 1 }}{{ $_ := set $fills "leader" (include "kimi.pod" (list $ $c $p "") | fromJson) }}{{ end -}}
  {{- if $lws }}{{ $_ := set $fills "worker" (include "kimi.pod" (list $ $c (last $g.procs) "") | fromJson) }}{{ end -}}
  {{- range $o := include "kimi.fill" (list (toJson (index $f.groups (ternary "master" $g.kind ($g.tcpService | default false)))) $fills) | fromJsonArray -}}
    {{- with $g.strategy }}{{ $_ := set $o.spec "strategy" (deepCopy .) }}{{ end -}}
    {{- if and (eq $o.kind "StatefulSet") (or (not $g.claims) $c.cacheVolume) }}{{ $_ := unset $o.spec "volumeClaimTemplates" }}{{ end -}}
    {{- with $o.spec.leaderWorkerTemplate -}}
      {{- if eq (len $g.procs) 1 }}{{ $_ := unset . "leaderTemplate" }}{{ end -}}
      {{- if $c.cacheVolume }}{{ $_ := unset . "volumeClaimTemplates" }}{{ end -}}
    {{- end -}}
    {{- $objects = append $objects $o -}}
  {{- end -}}
{{- end -}}
{{- $scalers = include "kimi.autoscaling" (list $ $c $objects) | fromJsonArray -}}
{{- end -}}
{{- toJson (dict "objects" $objects "scalers" $scalers) -}}
{{- end -}}
