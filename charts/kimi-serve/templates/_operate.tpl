{{/*
Autoscaling and monitoring (entrypoint/render/autoscaling.py and monitoring.py): plan's own objects,
copied from the shape table (buildsys/chart_copy.py) with this release's values in their placeholders.
kimi.autoscaling also sets the copies and the rollout of the engine groups it is given (their maps are
shared), as autoscaling.apply does.
*/}}

{{/* kimi.fill: (list json fills) -> the JSON text with each "@{k}" (a whole value) and each ${k} (part of a
string) filled from `fills` (buildsys/chart_copy.py fill). What a fill writes has its own `${` and `@{` escaped
(\u007b, the same text once parsed), so nothing in a user's value is ever taken for a placeholder */}}
{{- define "kimi.fill" -}}
{{- $text := index . 0 -}}
{{- range $k, $x := index . 1 -}}
  {{- $json := toJson $x | replace "${" "$\\u007b" | replace "@{" "@\\u007b" -}}
  {{- $text = $text | replace (printf "\"@{%s}\"" $k) $json | replace (printf "${%s}" $k) (ternary ($json | trimPrefix "\"" | trimSuffix "\"") $json (kindIs "string" $x)) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* kimi.operate: the operating settings (the chart's values under the settings' names) */}}
{{- define "kimi.operate" -}}
{{- $v := .Values -}}{{- $a := $v.autoscaling -}}{{- $m := $v.monitoring -}}
{{- /* each as given, else (a value set to null) plan's default for the setting */ -}}
{{- $out := dict "replicas" $v.replicas "max_replicas" $a.maxReplicas "scale_waiting" $a.waitingPerReplica "scale_kv_percent" $a.kvCachePercent
      "prometheus_url" $a.prometheusUrl "slo_ttft_ms" $m.sloTtftMs "slo_itl_ms" $m.sloItlMs -}}
{{- range (.Files.Get "files/facts.json" | fromJson).settings }}{{ if and (hasKey $out .name) (kindIs "invalid" (index $out .name)) }}{{ $_ := set $out .name .default }}{{ end }}{{ end -}}
{{- range $k, $x := omit $out "prometheus_url" }}{{ $_ := set $out $k (int $x) }}{{ end -}}
{{- /* monitoring.scraper.podLabels as KIMI_SCRAPER_LABELS writes them (key=value), for the hook to judge */ -}}
{{- $scraperLabels := list -}}
{{- range $k, $x := ($m.scraper.podLabels | default dict) }}{{ $scraperLabels = append $scraperLabels (printf "%s=%v" $k $x) }}{{ end -}}
{{- toJson (merge $out (dict "autoscaling" (ternary $a.engine "off" (and $a.enabled true)) "monitoring" (and $m.enabled true)
      "scraper_namespace" ($m.scraper.namespace | default "") "scraper_labels" $scraperLabels)) -}}
{{- end -}}

{{/* kimi.match: (list ctx facts components) -> PromQL matchers of this deployment's engines, of the components
given (render/monitoring.match: the table's matchers filled) */}}
{{- define "kimi.match" -}}
{{- $c := index . 0 -}}{{- $m := (index . 1).monitoring.match -}}{{- $components := index . 2 | default list -}}
{{- $fills := dict "name" $c.name "namespace" $c.namespace "component" (first $components | default "") "components" (join $m.separator $components) -}}
{{- include "kimi.fill" (list (index $m (ternary "all" (ternary "one" "many" (eq (len $components) 1)) (empty $components))) $fills) -}}
{{- end -}}

{{- define "kimi.autoscaling" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $a := $f.monitoring.autoscaling -}}
{{- $o := include "kimi.operate" $root | fromJson -}}
{{- $scalers := list -}}{{- $pdbs := list -}}
{{- range $e := index . 2 -}}
  {{- /* an engine group: a Deployment or LeaderWorkerSet of GPU processes (not the router, not a KV store's
        master), with the components of its pods that serve (and queue): a tp_dp group's every head */ -}}
  {{- $g := dict -}}
  {{- range $c.groups }}{{ if and (eq .name $e.metadata.name) (eq .kind $e.kind) }}{{ $g = . }}{{ end }}{{ end -}}
  {{- $serving := list -}}
  {{- range ($g.procs | default list) }}{{ if and .gpu .serves (not (has .role $serving)) }}{{ $serving = append $serving .role }}{{ end }}{{ end -}}
  {{- $engine := and $serving (ne $e.kind "StatefulSet") -}}
  {{- if $engine }}{{ $_ := set $e.spec "replicas" (int $o.replicas) }}{{ end -}}
  {{- if and (ne $o.autoscaling "off") (or $engine (eq ($g.component | default "") "router")) -}}
    {{- /* plan's rollout of an autoscaled group of the kind (autoscaling.apply: surge, deadline, zone spread) */ -}}
    {{- $_ := mergeOverwrite $e (include "kimi.fill" (list (toJson (index $a.rollout $e.kind)) (dict "progress_deadline" $c.budget.progressDeadline
          "pod_labels" (($e.spec.selector | default dict).matchLabels | default dict))) | fromJson) -}}
    {{- if $engine -}}
      {{- $podLabels := dict $f.defaults.lws.name_label $e.metadata.name -}}
      {{- with $e.spec.selector }}{{ $podLabels = .matchLabels }}{{ end -}}
      {{- $fill := merge (dict "meta" (pick $e.metadata "name" "namespace" "labels") "ref" (dict "apiVersion" $e.apiVersion "kind" $e.kind "name" $e.metadata.name)
            "pod_labels" $podLabels "match" (include "kimi.match" (list $c $f $serving))) $o -}}
      {{- $scalers = append $scalers (include "kimi.fill" (list (toJson (index $a $o.autoscaling)) $fill) | fromJson) -}}
      {{- $pdbs = append $pdbs (include "kimi.fill" (list (toJson $a.pdb) $fill) | fromJson) -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- toJson (concat $scalers $pdbs) -}}
{{- end -}}

{{- define "kimi.monitoring" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $v := $root.Values.monitoring -}}
{{- $out := list -}}
{{- if $v.enabled -}}
  {{- $fill := merge (dict "components" $c.components "match" (include "kimi.match" (list $c $f "")) "interval" ($v.interval | default $f.monitoring.interval)
        "dashboard" ($root.Files.Get "files/dashboard.json")) (include "kimi.operate" $root | fromJson) -}}
  {{- range include "kimi.copy" (list $c $f.monitoring.objects $fill) | fromJsonArray -}}
    {{- /* monitoring.labels: what the Prometheus selects its PodMonitors and rules by (e.g. release: kube-prometheus-stack) */ -}}
    {{- if ne .kind "ConfigMap" }}{{ $_ := set .metadata "labels" (merge .metadata.labels ($v.labels | default dict)) }}{{ end -}}
    {{- $out = append $out . -}}
  {{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
