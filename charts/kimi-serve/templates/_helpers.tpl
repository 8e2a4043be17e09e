{{/*
The chart draws the objects `kimi-serve plan --format k8s` renders for the same settings (tests/chart
compares them). It derives the deployment from the settings (the lookups below) but judges none:
every setting is judged by kimi-serve's own code, in the release's image, by the
pre-install/pre-upgrade hook (check-job.yaml) and again by every container before it loads anything. The shape comes from files/facts.json, a table generated from plan by
`python build.py chart` (recipe x hardware -> strategies offered, pod resources, pool sizes, ports,
the bound on a start; a test fails when it is stale). It parses no vLLM option: the options that draw a
deployment are refused in settings.extra_args by plan itself (typed settings set them). Where the
table has no entry for the settings (a recipe that does not run on the hardware, a strategy it does
not offer, an unknown variant or KV choice), only the hook renders, and refuses with plan's message.
Every helper returns JSON.
*/}}

{{/* kimi.ctx: the deployment the settings draw: names, groups of processes, env; {"ok": false} (with the
names, the image and the hook's env) where the shape table has no entry for them */}}
{{- define "kimi.ctx" -}}
{{- /* drawn once per render: every template includes it, each gets its own copy (fromJson) */ -}}
{{- if not (hasKey . "kimiCtx") }}{{ $_ := set . "kimiCtx" (include "kimi.draw" .) }}{{ end -}}
{{- .kimiCtx -}}
{{- end -}}

{{- define "kimi.draw" -}}
{{- $f := .Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $v := .Values -}}
{{- /* the settings as written: the schema takes each in the one spelling plan keeps of it */ -}}
{{- $s := $v.settings | default dict -}}
{{- $hw := required "settings.hardware is required: a hardware id of recipes/hardware.yaml" $s.hardware -}}
{{- /* settings.name, else the release's; settings.namespace, else the release's (plan judges both: the hook) */ -}}
{{- $name := $s.name | default .Release.Name -}}
{{- $ns := $s.namespace | default .Release.Namespace -}}
{{- /* what plan names each object (and a copy's head address), by what it names (buildsys/chart_copy.py names) */ -}}
{{- $names := include "kimi.fill" (list (toJson $f.names) (dict "name" $name)) | fromJson -}}
{{- $hwf := index $f.hardware $hw | default dict -}}
{{- /* the image, from one source (plan's, judged by the hook): settings.image (KIMI_IMAGE), else the hardware's
      published image built on the release (else the hook's kimi-serve, on the default release's image, refuses);
      settings.image_digest pins it (render/deployment.image) */ -}}
{{- $slug := $s.recipe | default $f.default_recipe -}}
{{- $r := index $f.recipes $slug | default dict -}}
{{- $fi := $f.images -}}
{{- $dv := index ($r.default_vllm | default dict) $hw | default $fi.default_vllm -}}
{{- $vllm := $s.vllm_version | default $dv -}}
{{- $target := $hwf.image_target | default "cpu" -}}
{{- $built := index (index $fi.refs $vllm | default dict) $target -}}
{{- $image := $s.image | default $built | default (index (index $fi.refs $dv | default dict) $target) | default "" -}}
{{- with $s.image_digest }}{{ $image = printf "%s@%s" (first (splitList "@" $image)) . }}{{ end -}}
{{- $iv := $v.image | default dict -}}
{{- $helmLabels := dict "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/instance" .Release.Name "app.kubernetes.io/version" (toString .Chart.AppVersion) -}}
{{- $o := include "kimi.operate" . | fromJson -}}
{{- /* what the hook's kimi-serve is given: the settings untouched, as the user wrote them (a KIMI_CONFIG
      file: check-job.yaml), the names, and the chart's operating values under their KIMI_* names */ -}}
{{- $judged := list (dict "name" "KIMI_CONFIG" "value" "/etc/kimi-serve/settings.json") (dict "name" "KIMI_NAME" "value" $name) (dict "name" "KIMI_NAMESPACE" "value" $ns) -}}
{{- range $fs := $f.settings -}}
  {{- if hasKey $f.chart_values $fs.name }}{{ with index $o $fs.name -}}
    {{- $judged = append $judged (dict "name" $fs.env "value" (ternary (join "," .) (toString .) (kindIs "slice" .))) -}}
  {{- end }}{{ end -}}
{{- end -}}
{{- $base := dict "ok" false "name" $name "names" $names "check" (printf "%s-check" $name | trunc 63 | trimSuffix "-") "verify" (printf "%s-verify" $name) "labels" (toJson $f.labels) "namespace" $ns "image" $image "hardware" $hw "helmLabels" $helmLabels "judged" $judged
      "pullPolicy" ($iv.pullPolicy | default "Always") "fleet" dict "archSelector" ($hwf.arch_selector | default dict) -}}
{{- /* the shape table's entry for the settings: recipe x hardware, strategy, variant, KV choice */ -}}
{{- $rhw := index ($r.hardware | default dict) $hw | default dict -}}
{{- $nodes := int (hasKey $s "nodes" | ternary $s.nodes 1) -}}
{{- $sid := $s.strategy | default (ternary ($r.default_strategy | default dict).multi ($r.default_strategy | default dict).single (gt $nodes 1)) -}}
{{- $vid := toString ($s.variant | default "default") -}}
{{- $kid := toString ($s.kv_offload | default "") -}}
{{- $kvs := index $f.kv.stores $kid | default dict -}}
{{- $kvo := index $f.kv.options $kid | default dict -}}
{{- /* KIMI_PRELOAD: `vllm preload` beside a single-node engine, its health path the release's */ -}}
{{- $release := $vllm -}}
{{- $preload := and ($s.preload | default false) (hasKey $f.preload.health_paths $release) -}}
{{- if not (and (or $s.image $built) (or (not $s.preload) $preload) $hwf $rhw (has $sid (ternary (index $f.tables (int ($rhw.strategies | default 0))) list (hasKey $rhw "strategies"))) (has $vid ($r.variants | default list)) (or (not $kid) $kvs (hasKey $f.kv.options $kid))) -}}
{{- toJson $base -}}
{{- else -}}
{{- $st := index $r.strategies $sid -}}
{{- $ff := $f.fleet -}}
{{- /* the copies' API pods, by shape (render/fleet.selector): the router's discovery, the Gateway pool's labels */ -}}
{{- $disc := include "kimi.fill" (list (toJson $ff.discovery) (dict "name" $name)) | fromJson -}}
{{- $front := toString ($s.router | default "vllm-router") -}}
{{- $copies := int $o.replicas -}}
{{- /* a fleet (docs/fleet.md): copies behind vllm-router or the cluster's Gateway, asked for by replicas > 1, or by the
      settings and values plan's fleet.choose reads (the table's asked_by), unless settings.router is none; an
      autoscaled PD cluster is a PD fleet, even of one unit */ -}}
{{- $asked := or (gt $copies 1) (and (eq $st.shape "pd_cluster") (ne $o.autoscaling "off")) -}}
{{- range $ff.asked_by.set }}{{ if hasKey $s . }}{{ $asked = true }}{{ end }}{{ end -}}
{{- range $k, $x := $ff.asked_by.values }}{{ if eq (toString (index $s $k)) $x }}{{ $asked = true }}{{ end }}{{ end -}}
{{- $fleet := and (ne $front "none") $asked -}}
{{- $cacheDir := "" -}}{{- $routerPort := 0 -}}{{- $grace := 0 -}}
{{- range $f.settings -}}
  {{- if eq .name "cache_dir" }}{{ $cacheDir = $s.cache_dir | default .default }}{{ end -}}
  {{- if eq .name "router_port" }}{{ $routerPort = int ($s.router_port | default .default) }}{{ end -}}
  {{- if eq .name "stop_grace" }}{{ $grace = int ($s.stop_grace | default .default) }}{{ end -}}
{{- end -}}
{{- $port := int ($s.port | default $d.port) -}}
{{- /* the settings every container gets: the user's, the pinned choices, the addresses the deployment gives its pods */ -}}
{{- $pinned := dict "hardware" $hw "strategy" $sid -}}
{{- /* the addresses the deployment gives its own pods, where the user gave none (plan: with_defaults) */ -}}
{{- $eff := dict -}}
{{- $groups := list -}}
{{- $lws := $d.lws -}}
{{- $selector := dict -}}
{{- $apiPort := $port -}}
{{- /* a KV store's master (Deployment + Service) and store (StatefulSet of one + headless Service), at the
      addresses the deployment gives them (k8s_kv.deployment_environ) */ -}}
{{- $kvFront := list -}}
{{- $pdRouter := dict -}}{{- $pdFleet := dict -}}
{{- if $kvs -}}
  {{- $roles := $kvs.roles -}}
  {{- $kvFront = list (dict "kind" "Deployment" "name" $names.master "component" "master" "claim" "" "tcpService" true
        "procs" (list (dict "role" "master" "serves" false "helper" true "port" (int $roles.master.port) "gpu" false "resources" $roles.master.resources))) -}}
  {{- if $kvs.store -}}
    {{- $kvFront = append $kvFront (dict "kind" "StatefulSet" "name" $names.store "component" "store" "replicas" 1 "claims" false
          "procs" (list (dict "role" "store" "serves" false "helper" true "port" (int $roles.store.port) "gpu" false "rank" true "resources" $roles.store.resources))) -}}
  {{- end -}}
{{- end -}}
{{- if and (eq $st.shape "single") $kvs -}}
  {{- /* render/k8s_kv.py: master (Deployment + Service), store (StatefulSet of one + headless Service),
        instances (StatefulSet, each pod its claim, rank = pod index), the cache-aware router when N > 1 */ -}}
  {{- $inst := int ($s.kv_instances | default $kvs.default_instances) -}}
  {{- $_ := set $pinned "kv_instances" $inst -}}
  {{- $groups = $kvFront -}}
  {{- $groups = append $groups (dict "kind" "StatefulSet" "name" $names.instance "component" "instance" "replicas" $inst "claims" true
        "procs" (list (dict "role" "instance" "serves" true "port" $port "gpu" true "rank" true))) -}}
  {{- if gt $inst 1 -}}
    {{- $rport := int ($s.router_port | default $kvs.roles.router.port) -}}
    {{- $groups = append $groups (dict "kind" "Deployment" "name" $names.router "component" "router" "claim" ""
          "procs" (list (dict "role" "router" "serves" true "port" $rport "gpu" false "resources" $kvs.roles.router.resources))) -}}
    {{- $selector = include "kimi.labels" (list $base "router") | fromJson -}}
    {{- $apiPort = $rport -}}
  {{- else -}}
    {{- $selector = include "kimi.labels" (list $base "instance") | fromJson -}}
  {{- end -}}
{{- else if eq $st.shape "single" -}}
  {{- $groups = list (dict "kind" "Deployment" "name" $names.single "component" "single" "claim" $names.cache
        "procs" (list (dict "role" "single" "serves" true "port" $port "gpu" true))) -}}
  {{- $selector = include "kimi.labels" (list $base "single") | fromJson -}}
{{- else if eq $st.shape "multi_node" -}}
  {{- $_ := set $pinned "nodes" $nodes -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $procs := list (dict "role" "head" "serves" true "port" $port "gpu" true) -}}
  {{- if gt $nodes 1 }}{{ $procs = append $procs (dict "role" "worker" "serves" $st.worker_serves_http "port" $port "gpu" true) }}{{ end -}}
  {{- $groups = list (dict "kind" "LeaderWorkerSet" "name" $names.head "component" "head" "procs" $procs "size" $nodes) -}}
  {{- $selector = dict $lws.name_label $names.head -}}
  {{- if not $st.worker_serves_http }}{{ $_ := set $selector $lws.index_label "0" }}{{ end -}}
{{- else -}}
  {{- $groups = $kvFront -}}
  {{- /* a PD fleet (render/k8s_fleet.py pd_fleet): each pool's API pods by a selector of its own, every pool on the
        port plan gives it in a fleet (the table's fleet_ports: the router's one discovery port) */ -}}
  {{- $pdTerms := list -}}
  {{- range $role := list "prefill" "decode" -}}
    {{- $key := printf "%s_nodes" $role -}}
    {{- $pools := index (index $f.tables (int $rhw.pd_pools)) $vid -}}
    {{- $pool := index $pools $role -}}
    {{- $derived := $pool.nodes -}}
    {{- with index $s (printf "%s_parallelism" $role) }}{{ with index ($pool.nodes_by_parallelism | default dict) . }}{{ $derived = . }}{{ end }}{{ end -}}
    {{- $n := int (hasKey $s $key | ternary (index $s $key) $derived) -}}
    {{- $_ := set $pinned $key $n -}}
    {{- $par := index $s (printf "%s_parallelism" $role) | default (index $pools $role).parallelism -}}
    {{- $lname := index $names $role -}}
    {{- $rport := int (index (ternary $r.pd.fleet_ports $r.pd.ports $fleet) $role) -}}
    {{- $terms := index $disc.selector.pd_cluster $role -}}
    {{- $pdTerms = concat $pdTerms (ternary $terms (list (first $terms)) (and (gt $n 1) (not (index (index $r.pd.worker_serves_http $role) $par)))) -}}
    {{- $procs := list (dict "role" $role "serves" true "port" $rport "gpu" true) -}}
    {{- if gt $n 1 }}{{ $procs = append $procs (dict "role" $role "serves" (index (index $r.pd.worker_serves_http $role) $par) "port" $rport "gpu" true) }}{{ end -}}
    {{- $groups = append $groups (dict "kind" "LeaderWorkerSet" "name" $lname "component" $role "procs" $procs "size" $n) -}}
  {{- end -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $pdRouter = dict "kind" "Deployment" "name" $names.router "component" "router" "claim" ""
        "procs" (list (dict "role" "router" "serves" true "port" $routerPort "gpu" false)) -}}
  {{- $groups = append $groups $pdRouter -}}
  {{- $selector = include "kimi.labels" (list $base "router") | fromJson -}}
  {{- $apiPort = $routerPort -}}
  {{- $pdFleet = dict "terms" $pdTerms -}}
{{- end -}}

{{- /* the fleet (render/k8s_fleet.py, render/gateway.py): the router or the Gateway's pool in front of the copies */ -}}
{{- $fleetOut := dict -}}
{{- if $fleet -}}
  {{- $isPd := eq $st.shape "pd_cluster" -}}
  {{- /* a shape the table has no pool for (a PD cluster: plan refuses the Gateway before it, and so does the hook)
        draws the single-node pool's labels, so every object stays one the API server takes */ -}}
  {{- $pool := index $disc.pool $st.shape | default $disc.pool.single -}}
  {{- if eq $front "vllm-router" -}}
    {{- $rp := ternary $routerPort (int ($s.router_port | default $ff.router.port)) $isPd -}}
    {{- $_ := set $eff "router_selector" (ternary (join "," ($pdFleet.terms | default list)) (index $disc.selector $st.shape) $isPd) -}}
    {{- /* what the router's own plan needs that no other container gets (k8s_fleet._router_deployment) */ -}}
    {{- $own := list (dict "name" "KIMI_NAMESPACE" "value" $ns) (dict "name" "KIMI_REPLICAS" "value" (toString $copies)) -}}
    {{- if eq $st.shape "multi_node" }}{{ $own = append $own (dict "name" "KIMI_HEAD_ADDR" "value" $names.head_addr) }}{{ end -}}
    {{- $router := dict "env" $own "serviceAccount" $names.router "metricsPort" (int $ff.router.metrics_port) "metricsName" $ff.router.metrics_port_name "tokenSkip" $ff.router.token_skip -}}
    {{- if $isPd -}}
      {{- /* the PD cluster's own router is the fleet's (its port and pod size); each pool pod its group's addresses */ -}}
      {{- $_ := set $pdRouter "strategy" $ff.router.strategy -}}
      {{- $_ := set (first $pdRouter.procs) "fleet" $router -}}
      {{- $_ := set $pdFleet "groupVar" (dict "name" $ff.pd.group_var "valueFrom" (dict "fieldRef" (dict "fieldPath" $ff.pd.group_field))) -}}
    {{- else -}}
      {{- $groups = append $groups (dict "kind" "Deployment" "name" $names.router "component" "router" "claim" "" "strategy" $ff.router.strategy
            "procs" (list (dict "role" "router" "serves" true "port" $rp "gpu" false "resources" $ff.router.resources "fleet" $router))) -}}
      {{- $selector = include "kimi.labels" (list $base "router") | fromJson -}}
      {{- $apiPort = $rp -}}
    {{- end -}}
    {{- $fleetOut = dict "router" true "serviceAccount" $names.router -}}
    {{- if $isPd }}{{ $_ := set $fleetOut "groups" $pdFleet }}{{ end -}}
  {{- else if eq $front "gateway" -}}
    {{- $selector = $pool -}}
    {{- $fleetOut = dict "gateway" true "pool" $pool "port" $port -}}
  {{- end -}}
{{- end -}}
{{- /* every container: the user's settings untouched from the <name>-settings ConfigMap (settings.yaml), then as
      variables only what the deployment adds: its name, by which each container names its peers (their addresses:
      KIMI_PEER_NAMES), the pinned choices and the fleet's discovery (render/k8s_pod.k8s_env) */ -}}
{{- $given := dict -}}
{{- $env := list (dict "name" "KIMI_CONFIG_JSON" "valueFrom" (dict "configMapKeyRef" (dict "name" $names.settings "key" "settings.json")))
      (dict "name" "KIMI_NAME" "value" $name) (dict "name" "KIMI_PEER_NAMES" "value" "k8s") -}}
{{- range $f.settings -}}
  {{- if .passed -}}
    {{- if hasKey $s .name }}{{ $_ := set $given .name (index $s .name) }}{{ end -}}
    {{- if hasKey $pinned .name -}}{{ $env = append $env (dict "name" .env "value" (toString (index $pinned .name))) }}
    {{- else if and (hasKey $eff .name) (not (hasKey $s .name)) -}}{{ $env = append $env (dict "name" .env "value" (index $eff .name)) }}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- /* what only the chart decides: the service account, the token's Secret, the user's env, the cache volume */ -}}
{{- $sa := $v.serviceAccount | default dict -}}
{{- $saCreate := eq (toString $sa.create) "true" -}}
{{- $saName := ternary ($sa.name | default $name) ($sa.name | default "") $saCreate -}}
{{- $pers := $v.persistence | default dict -}}
{{- $cacheVolume := dict -}}
{{- if eq (toString $pers.enabled) "false" -}}
  {{- $cacheVolume = dict "emptyDir" dict -}}
{{- else if $pers.existingClaim -}}
  {{- $cacheVolume = dict "persistentVolumeClaim" (dict "claimName" $pers.existingClaim) -}}
{{- end -}}
{{- $hf := $v.hfToken | default dict -}}
{{- $engineResources := dict -}}
{{- with $rhw.engine_resources }}{{ $engineResources = index (index (index $f.tables (int .)) $vid | default dict) $sid | default dict }}{{ end -}}
{{- /* a host backend's node pod: each amount a setting's value as written, where it is given (recipe.with_host) */ -}}
{{- $nodeResources := deepCopy $hwf.resources -}}
{{- range $k, $by := ($hwf.sized_by | default dict) }}{{ with index $s (first $by) }}{{ $_ := set $nodeResources $k (include "kimi.fill" (list (last $by) (dict "value" (toString .)))) }}{{ end }}{{ end -}}
{{- /* the components of the pods that serve vLLM's API (and /metrics): not the router (monitoring.engine_components) */ -}}
{{- $components := list -}}
{{- range $g := $groups }}{{ range $g.procs }}{{ if and .serves (ne .role "router") (not (has .role $components)) }}{{ $components = append $components .role }}{{ end }}{{ end }}{{ end -}}
{{- $out := merge (dict "ok" true "engineResources" ($engineResources | default $nodeResources) "grace" $grace "strategy" $sid "shape" $st.shape "budget" $r.startup
      "serviceAccount" $saName "automountToken" (and $saCreate (eq (toString $sa.automount) "true")) "userEnv" ($v.extraEnv | default list) "envFrom" ($v.envFrom | default list)
      "tokenSecret" ($hf.secretName | default $names.token) "tokenKey" ($hf.key | default $d.token.key)
      "cacheVolume" $cacheVolume "scraper" (dict "namespace" ($v.monitoring.scraper.namespace | default "monitoring") "podLabels" ($v.monitoring.scraper.podLabels | default dict))
      "groups" $groups "components" $components "selector" $selector "apiPort" $apiPort "env" $env "given" $given "cacheDir" $cacheDir
      "pd" (eq $st.shape "pd_cluster") "roles" (or (eq $st.shape "pd_cluster") (not (empty $kvs)))
      "companion" (ternary (dict) ($kvo.companion | default dict) (empty $kvo)) "fleet" $fleetOut
      "preload" (ternary (dict "path" (index $f.preload.health_paths $release) "gpusEnv" (index $f.preload.gpus_env $hw)) dict $preload)) $base -}}
{{- toJson $out -}}
{{- end -}}
{{- end -}}

{{/* kimi.scraper: (list facts ctx) -> the `from` peer of the Prometheus that scrapes the metrics ports: its
namespace (monitoring.scraper.namespace) and, when named, its pods' labels (k8s.scraper) */}}
{{- define "kimi.scraper" -}}
{{- $c := index . 1 -}}
{{- $peer := dict "namespaceSelector" (dict "matchLabels" (dict (index . 0).defaults.namespace_label $c.scraper.namespace)) -}}
{{- with $c.scraper.podLabels }}{{ $_ := set $peer "podSelector" (dict "matchLabels" .) }}{{ end -}}
{{- toJson $peer -}}
{{- end -}}

{{/* kimi.labels: (list ctx component) -> the labels of a component's objects, plan's (the table's labels) */}}
{{- define "kimi.labels" -}}
{{- include "kimi.fill" (list (index . 0).labels (dict "name" (index . 0).name "component" (index . 1))) -}}
{{- end -}}

{{/* kimi.meta: (list ctx name component [annotations]) -> metadata */}}
{{- define "kimi.meta" -}}
{{- $c := index . 0 -}}
{{- $m := dict "name" (index . 1) "namespace" $c.namespace "labels" (merge (include "kimi.labels" (list $c (index . 2)) | fromJson) $c.helmLabels) -}}
{{- if and (gt (len .) 3) (index . 3) }}{{ $_ := set $m "annotations" (index . 3) }}{{ end -}}
{{- toJson $m -}}
{{- end -}}

{{/* kimi.skips: (list facts image reason [more]) -> checkov's numbered skip annotations (k8s_pod.skip_annotations):
the reason's (a pod that serves nothing to probe) and the tag's (an image without a digest), then `more` */}}
{{- define "kimi.skips" -}}
{{- $d := (index . 0).defaults -}}
{{- $skips := dict -}}
{{- with index . 2 }}{{ $_ := set $skips "CKV_K8S_8" (index $d.skips .) }}{{ $_ := set $skips "CKV_K8S_9" (index $d.skips .) }}{{ end -}}
{{- if not (contains "@sha256:" (index . 1)) }}{{ $_ := set $skips "CKV_K8S_43" $d.skips.tag }}{{ end -}}
{{- $out := dict -}}
{{- range $i, $check := keys $skips | sortAlpha }}{{ $_ := set $out (index $d.skip_keys $i) (printf "%s=%s" $check (index $skips $check)) }}{{ end -}}
{{- with rest (rest (rest .)) }}{{ with first . }}{{ $_ := set $out (index $d.skip_keys (len $out)) . }}{{ end }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* kimi.procSkips: (list facts ctx proc) -> the skips of a process's pod: a headless worker's (it serves nothing
to probe), the tag's, and a fleet router's token */}}
{{- define "kimi.procSkips" -}}
{{- $p := index . 2 -}}
{{- include "kimi.skips" (list (index . 0) (index . 1).image (ternary "" "headless" (or $p.serves $p.helper false)) ($p.fleet | default dict).tokenSkip) -}}
{{- end -}}

{{/* kimi.tool: (list root ctx reason container) -> {annotations, spec} of a tool's pod (the hook's check, `helm
test`'s verify): it runs once and exits, with no GPU, no API access and scratch only, on a node of the image's
architecture; `container` gives its name, command, args, env and more mounts and volumes */}}
{{- define "kimi.tool" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}{{- $more := index . 3 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $mounts := list -}}{{- $volumes := list -}}
{{- range $f.defaults.scratch }}{{ $mounts = append $mounts (dict "name" (index . 0) "mountPath" (index . 1)) }}{{ $volumes = append $volumes (dict "name" (index . 0) "emptyDir" dict) }}{{ end -}}
{{- $one := $f.defaults.tool_resources -}}
{{- $container := dict "image" $c.image "imagePullPolicy" $c.pullPolicy "terminationMessagePolicy" "FallbackToLogsOnError"
      "resources" (dict "limits" $one "requests" (deepCopy $one)) "securityContext" $f.defaults.container_security "volumeMounts" (concat $mounts ($more.volumeMounts | default list)) -}}
{{- range $k, $x := omit $more "volumes" "volumeMounts" }}{{ if $x }}{{ $_ := set $container $k $x }}{{ end }}{{ end -}}
{{- $spec := dict "restartPolicy" "Never" "enableServiceLinks" false "automountServiceAccountToken" false "securityContext" $f.router.pod_security
      "containers" (list $container) "volumes" (concat $volumes ($more.volumes | default list)) "nodeSelector" $c.archSelector -}}
{{- with $root.Values.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end -}}
{{- toJson (dict "annotations" (include "kimi.skips" (list $f $c.image (index . 2)) | fromJson) "spec" $spec) -}}
{{- end -}}

{{/* kimi.pod: (list root ctx proc claim) -> {metadata, spec} of the pod template: plan's pod of the process's kind
(the table's pods: render/k8s_pod.pod_spec) filled with its values, then the chart's own values over it */}}
{{- define "kimi.pod" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}{{- $p := index . 2 -}}{{- $claim := index . 3 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $v := $root.Values -}}
{{- $hwf := index $f.hardware $c.hardware -}}
{{- $env := $c.env -}}
{{- $settingsEnv := $env -}}
{{- if or $c.roles $p.fleet }}{{ $env = append $env (dict "name" "KIMI_ROLE" "value" $p.role) }}{{ end -}}
{{- /* a StatefulSet pod's rank is its ordinal (k8s_kv._with_rank) */ -}}
{{- if $p.rank }}{{ $env = prepend $env (dict "name" "KIMI_NODE_RANK" "valueFrom" (dict "fieldRef" (dict "fieldPath" $f.kv.pod_index))) }}{{ end -}}
{{- $env = concat (append $env $d.token_env) $c.userEnv -}}
{{- /* a fleet's router: where it discovers the copies, and how many (k8s_fleet._router_deployment) */ -}}
{{- with $p.fleet }}{{ $env = concat .env $env }}{{ end -}}
{{- /* a PD fleet's pool pod: its group's index from the pod's label, by which it names its own group's pool pods
      (k8s_fleet._own_group) */ -}}
{{- with $c.fleet.groups }}{{ if $p.gpu }}{{ $env = prepend $env .groupVar }}{{ end }}{{ end -}}
{{- $amounts := deepCopy ($p.resources | default (ternary $c.engineResources $f.router.resources $p.gpu)) -}}
{{- $resources := dict "limits" $amounts "requests" (deepCopy $amounts) -}}
{{- if and $p.gpu $v.resources -}}
  {{- /* the chart's resources override the CPU and memory of the engine containers; the GPUs are the plan's */ -}}
  {{- range $kind := list "limits" "requests" -}}
    {{- range $k, $q := (index $v.resources $kind | default dict) -}}
      {{- if and (hasKey $amounts $k) (not (has $k (list "cpu" "memory"))) (ne (toString $q) (toString (index $amounts $k))) -}}
        {{- fail (printf "resources.%s.%s=%v: the GPUs of a pod are the plan's (%v on %s, what its strategy needs); override cpu and memory only" $kind $k $q (index $amounts $k) $c.hardware) -}}
      {{- end -}}
      {{- $_ := set (index $resources $kind) $k $q -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- $dres := dict -}}
{{- range $kind, $am := $resources }}{{ $_ := set $dres $kind (pick $am "cpu" "memory") }}{{ end -}}
{{- $labels := merge (include "kimi.labels" (list $c $p.role) | fromJson) (deepCopy ($v.podLabels | default dict)) $c.helmLabels -}}
{{- /* a changed setting rolls the pods (render/k8s_pod.py settings_checksum: Helm's checksum idiom) */ -}}
{{- $ann := merge (deepCopy ($v.podAnnotations | default dict)) (include "kimi.procSkips" (list $f $c $p) | fromJson) -}}
{{- $_ := set $ann "checksum/settings" (toJson $c.given | sha256sum) -}}
{{- /* plan's pod of the kind, its slots filled */ -}}
{{- $fills := dict "image" $c.image "pull_policy" $c.pullPolicy "cache_dir" $c.cacheDir "token_secret" $c.tokenSecret "token_key" $c.tokenKey
      "port" $p.port "failure_threshold" $c.budget.failureThreshold "grace" $c.grace "env" $env "limits" $resources.limits "requests" $resources.requests "download_limits" $dres.limits "download_requests" $dres.requests
      "pod_security" (ternary $hwf.pod_security $f.router.pod_security $p.gpu) "labels" $labels "annotations" $ann
      "node_selector" (ternary (merge (deepCopy ($v.nodeSelector | default dict)) $hwf.node_selector) $c.archSelector $p.gpu) -}}
{{- $kind := ternary (ternary "serving" "headless" $p.serves) (ternary "router" "helper" $p.serves) $p.gpu -}}
{{- $copy := dict "pod" (index $f.pods $kind) -}}
{{- if and $c.companion $p.gpu -}}
  {{- /* LMCache's server beside the engine (k8s_kv.add_companions): bound to the pod, sharing its /dev/shm */ -}}
  {{- $_ := set $copy "companion" $f.pods.companion -}}
  {{- $_ := set $fills "companion_env" (concat (append (deepCopy $settingsEnv) (dict "name" "KIMI_ROLE" "value" $c.companion.role)) $c.userEnv) -}}
{{- end -}}
{{- $copy = include "kimi.fill" (list (toJson $copy) $fills) | fromJson -}}
{{- $spec := $copy.pod.spec -}}{{- $container := first $spec.containers -}}
{{- /* a serving container's probes, each overlaid with the chart's `probes` */ -}}
{{- range $k := ternary (list "startup" "readiness" "liveness") list $p.serves -}}
  {{- $_ := set $container (printf "%sProbe" $k) (merge (deepCopy (index ($v.probes | default dict) $k | default dict)) (index $container (printf "%sProbe" $k))) -}}
{{- end -}}
{{- if $p.gpu -}}
  {{- if $claim }}{{ $_ := set $spec "volumes" (append $spec.volumes (dict "name" $d.volumes.cache "persistentVolumeClaim" (dict "claimName" $claim))) }}
  {{- else if $c.cacheVolume }}{{ $_ := set $spec "volumes" (append $spec.volumes (merge (dict "name" $d.volumes.cache) $c.cacheVolume)) }}{{ end -}}
  {{- if and $c.preload (eq $p.role "single") -}}
    {{- /* KIMI_PRELOAD: the weight cache's sockets, in a memory-backed volume (k8s_pod.add_weight_cache) */ -}}
    {{- $_ := set $container "volumeMounts" (append $container.volumeMounts (deepCopy $f.preload.socket)) -}}
    {{- $_ := set $spec "volumes" (append $spec.volumes (dict "name" $f.preload.socket.name "emptyDir" (dict "medium" "Memory"))) -}}
  {{- end -}}
  {{- /* Helm's escape hatches: the user's volumes on every GPU pod, mounted in the server and the download step */ -}}
  {{- /* judged as the API server would judge the pod: a volume name or a mountPath once, a mount of a volume that exists */ -}}
  {{- $names := list $d.volumes.cache -}}{{- range $spec.volumes }}{{ $names = append $names .name }}{{ end -}}
  {{- $paths := list -}}{{- range $container.volumeMounts }}{{ $paths = append $paths .mountPath }}{{ end -}}
  {{- range $hatch := list "extraVolumes" "extraVolumeMounts" -}}{{- range $i, $x := (index $v $hatch | default list) -}}
    {{- if regexMatch $f.credential_pattern (toJson $x) -}}
      {{- fail (printf "%s[%d] carries a credential (a URL's user:password@ or a token in its query): no credential renders outside a Secret; mount it from a Secret (a secret volume) instead" $hatch $i) -}}
    {{- end -}}
  {{- end -}}{{- end -}}
  {{- range $i, $x := ($v.extraVolumes | default list) -}}
    {{- if has $x.name $names -}}
      {{- fail (printf "extraVolumes[%d].name=%s: the pod already has a volume of that name (the chart's own: %s, or an earlier extraVolumes entry); give it another name" $i (toJson $x.name) (join ", " $names)) -}}
    {{- end -}}
    {{- $names = append $names $x.name -}}
  {{- end -}}
  {{- range $i, $x := ($v.extraVolumeMounts | default list) -}}
    {{- if not (has $x.name $names) -}}
      {{- fail (printf "extraVolumeMounts[%d].name=%s names no volume of the pod (its volumes: %s); add the volume to extraVolumes, or mount one that exists" $i (toJson $x.name) (join ", " $names)) -}}
    {{- end -}}
    {{- if has (trimSuffix "/" $x.mountPath) $paths -}}
      {{- fail (printf "extraVolumeMounts[%d].mountPath=%s: the server container already mounts a volume there (the chart's own mounts: %s, or an earlier entry); choose another path" $i (toJson $x.mountPath) (join ", " $paths)) -}}
    {{- end -}}
    {{- $paths = append $paths (trimSuffix "/" $x.mountPath) -}}
  {{- end -}}
  {{- $_ := set $spec "volumes" (concat $spec.volumes ($v.extraVolumes | default list)) -}}
  {{- $_ := set $container "volumeMounts" (concat $container.volumeMounts ($v.extraVolumeMounts | default list)) -}}
  {{- $download := first $spec.initContainers -}}
  {{- $_ := set $download "volumeMounts" (concat $download.volumeMounts ($v.extraVolumeMounts | default list)) -}}
  {{- if and $c.preload (eq $p.role "single") -}}
    {{- /* `vllm preload` as a native sidecar (an init container that keeps running): it starts before the engine,
          survives its restarts, sees the node's GPUs the brand's way (recipes/hardware.yaml k8s_sidecar_gpus_env) */ -}}
    {{- $penv := concat (deepCopy $settingsEnv) (list (dict "name" "KIMI_ROLE" "value" $f.preload.role) $d.token_env) $c.preload.gpusEnv $c.userEnv -}}
    {{- $sidecar := merge (dict "name" $f.preload.role "env" $penv "volumeMounts" (deepCopy $container.volumeMounts) "image" $c.image "imagePullPolicy" $c.pullPolicy)
          (fromJson (toJson $f.preload.container | replace "${health_path}" $c.preload.path)) -}}
    {{- /* its start-up budget is the launch's, as the engine's (k8s_pod.add_weight_cache: the same health figures) */ -}}
    {{- $_ := set $sidecar.startupProbe "failureThreshold" $container.startupProbe.failureThreshold -}}
    {{- $_ := set $spec "initContainers" (append $spec.initContainers $sidecar) -}}
  {{- end -}}
  {{- range $k := list "runtimeClassName" "priorityClassName" "schedulerName" }}{{ with index $v $k }}{{ $_ := set $spec $k . }}{{ end }}{{ end -}}
  {{- with $copy.companion }}{{ $_ := set $spec "containers" (append $spec.containers .) }}{{ end -}}
{{- end -}}
{{- with $p.fleet -}}
  {{- /* a fleet's router lists and watches the copies' pods with its own ServiceAccount's token (its Role) */ -}}
  {{- $_ := set $container "ports" (append $container.ports (dict "name" .metricsName "containerPort" .metricsPort)) -}}
  {{- $_ := set $spec "serviceAccountName" .serviceAccount }}{{ $_ := set $spec "automountServiceAccountToken" true -}}
{{- else -}}
  {{- $_ := set $spec "automountServiceAccountToken" $c.automountToken -}}
  {{- with $c.serviceAccount }}{{ $_ := set $spec "serviceAccountName" . }}{{ end -}}
{{- end -}}
{{- with $c.envFrom }}{{ range concat $spec.containers ($spec.initContainers | default list) }}{{ $_ := set . "envFrom" $c.envFrom }}{{ end }}{{ end -}}
{{- range $k := list "tolerations" "affinity" "imagePullSecrets" }}{{ with index $v $k }}{{ $_ := set $spec $k . }}{{ end }}{{ end -}}
{{- toJson $copy.pod -}}
{{- end -}}

{{/* kimi.claimSpec: (list root shared) -> the cache claim (k8s._cache_claim_spec and cache_access; persistence.*):
ReadWriteMany where two pods of one claim can run at once, else ReadWriteOnce, unless persistence.accessMode says */}}
{{- define "kimi.claimSpec" -}}
{{- $root := index . 0 -}}{{- $shared := index . 1 -}}
{{- $f := $root.Files.Get "files/facts.json" | fromJson -}}
{{- $pers := $root.Values.persistence | default dict -}}
{{- $mode := $pers.accessMode | default (ternary "ReadWriteMany" "ReadWriteOnce" $shared) -}}
{{- if and $shared (has $mode (list "ReadWriteOnce" "ReadWriteOncePod")) -}}
  {{- fail (printf "persistence.accessMode=%s, but two pods share the cache claim (replicas > 1, or an autoscaler's surge rollout): the second pod, on another node, never attaches it. Use ReadWriteMany (a storage class that shares), or one copy without autoscaling" $mode) -}}
{{- end -}}
{{- $spec := dict "accessModes" (list $mode) "resources" (dict "requests" (dict "storage" ($pers.size | default $f.defaults.cache_size))) -}}
{{- with $pers.storageClassName }}{{ $_ := set $spec "storageClassName" . }}{{ end -}}
{{- toJson $spec -}}
{{- end -}}

{{/* kimi.copy: (list ctx objects fills) -> plan's objects from the shape table (buildsys/chart_copy.py) with the
release's name and namespace and `fills` in their placeholders (kimi.fill), Helm's labels on each object and
its pod template: a JSON array */}}
{{- define "kimi.copy" -}}
{{- $c := index . 0 -}}
{{- $out := list -}}
{{- range include "kimi.fill" (list (toJson (index . 1)) (merge (dict "name" $c.name "namespace" $c.namespace) (index . 2))) | fromJsonArray -}}
  {{- $_ := set .metadata "labels" (merge .metadata.labels $c.helmLabels) -}}
  {{- with .spec }}{{ with .template }}{{ $_ := set .metadata "labels" (merge .metadata.labels $c.helmLabels) }}{{ end }}{{ end -}}
  {{- $out = append $out . -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
