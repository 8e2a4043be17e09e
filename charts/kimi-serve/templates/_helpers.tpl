{{/*
The chart's objects are the objects `kimi-serve plan --format k8s` renders for the same settings
(tests/chart compares them). Facts come from files/facts.json, generated from recipes/ and the
renderers by `python build.py chart` (a test fails when it is stale); the logic below mirrors
entrypoint/render/k8s.py, k8s_pod.py, autoscaling.py, monitoring.py and, for a fleet, k8s_fleet.py
(the router joins the groups; its RBAC and monitor: router-*.yaml) and gateway.py (inferencepool.yaml,
epp-*.yaml). Every helper returns JSON.
*/}}

{{/* kimi.env: the value of a setting as a container environment variable (render/deployment.py _env_value) */}}
{{- define "kimi.envValue" -}}
{{- if kindIs "bool" . -}}{{ ternary "1" "0" . }}
{{- else if kindIs "slice" . -}}{{ join "," . }}
{{- else if kindIs "float64" . -}}{{ int64 . }}
{{- else -}}{{ . }}
{{- end -}}
{{- end -}}

{{/* kimi.ctx: the deployment the settings describe: names, shape, groups of processes, env */}}
{{- define "kimi.ctx" -}}
{{- $f := .Files.Get "files/facts.json" | fromJson -}}
{{- $d := $f.defaults -}}
{{- $s := dict -}}
{{- range $k, $v := (.Values.settings | default dict) }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $s $k $v }}{{ end }}{{ end -}}
{{- $hw := required "settings.hardware is required: a hardware id of recipes/hardware.yaml" $s.hardware -}}
{{- if $s.preload }}{{ fail "settings.preload: the chart does not draw the weight cache sidecar (vllm preload) yet; render it with KIMI_PRELOAD=1 kimi-serve plan --format k8s (docs/day2.md), or unset settings.preload" }}{{ end -}}
{{- if not (hasKey $f.hardware $hw) }}{{ fail (printf "settings.hardware=%s is not a hardware id the chart knows" $hw) }}{{ end -}}
{{- $hwf := index $f.hardware $hw -}}
{{- $slug := $s.recipe | default $f.default_recipe -}}
{{- $r := index $f.recipes $slug -}}
{{- if not (hasKey $r.hardware $hw) }}{{ fail (printf "the %s recipe does not run on %s (it runs on %s)" $r.title $hw (join ", " (keys $r.hardware | sortAlpha))) }}{{ end -}}
{{- $rhw := index $r.hardware $hw -}}
{{- /* settings.vllm_version as plan reads it (select._valid_vllm_version): the release it names, and the newest
   class of releases not newer than it (select.version_classes), which keys plan's verdicts on it */ -}}
{{- $ver := "" -}}{{- $vcls := "" -}}
{{- if $s.vllm_version -}}
  {{- $ver = trimPrefix "v" (regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" (trim (toString $s.vllm_version))) -}}
  {{- if not $ver }}{{ fail (replace $f.vllm.mark (toString $s.vllm_version) $f.vllm.invalid) }}{{ end -}}
  {{- range $f.vllm.classes }}{{ if semverCompare (printf "<=%s" $ver) . }}{{ $vcls = . }}{{ end }}{{ end -}}
{{- end -}}
{{- /* plan's verdicts, setting by setting (files/facts.json `verdicts`, from real launches): its message where it refuses */ -}}
{{- $vd := index $f.tables (int (index $rhw "verdicts")) -}}
{{- if and $vcls (hasKey ($vd.vllm_version | default dict) $vcls) }}{{ fail (replace $f.vllm.mark $ver (index $f.kv.messages (int (index $vd.vllm_version $vcls)))) }}{{ end -}}
{{- $vid := toString ($s.variant | default "default") -}}
{{- if hasKey ($vd.variant | default dict) $vid }}{{ fail (index $f.kv.messages (int (index $vd.variant $vid))) }}{{ end -}}
{{- $pid := toString ($s.profile | default "") -}}
{{- if hasKey ($vd.profile | default dict) $pid }}{{ fail (index $f.kv.messages (int (index $vd.profile $pid))) }}{{ end -}}
{{- if and (hasKey $s "features") (hasKey $vd "features") -}}
  {{- $toks := list -}}
  {{- range $tok := splitList "," (toString $s.features) }}{{ $toks = append $toks (trim $tok) }}{{ end -}}
  {{- with index $vd.features (join "," (sortAlpha $toks)) }}{{ fail (index $f.kv.messages (int .)) }}{{ end -}}
  {{- range $toks }}{{ with index $vd.features . }}{{ fail (index $f.kv.messages (int .)) }}{{ end }}{{ end -}}
{{- end -}}
{{- /* a credential among the vLLM arguments would be written into every pod: plan refuses it, so does the chart */ -}}
{{- range $word := splitList " " (toString ($s.extra_args | default "")) -}}
  {{- $flag := first (splitList "=" (first (splitList "." (trim $word)))) | replace "_" "-" -}}
  {{- if and (hasPrefix "--" $flag) (gt (len $flag) 2) -}}
    {{- range $f.secrets.flags }}{{ if hasPrefix $flag . }}{{ fail $f.secrets.message }}{{ end }}{{ end -}}
  {{- end -}}
{{- end -}}
{{- $nodes := int (hasKey $s "nodes" | ternary $s.nodes 1) -}}
{{- $sid := $s.strategy | default (ternary $r.default_strategy.multi $r.default_strategy.single (gt $nodes 1)) -}}
{{- if not (has $sid $rhw.strategies) }}{{ fail (printf "settings.strategy=%s is not one the %s recipe offers on %s (it offers %s)" $sid $r.title $hw (join ", " $rhw.strategies)) }}{{ end -}}
{{- $st := index $r.strategies $sid -}}
{{- with index (index $f.tables (int (index $rhw "by_strategy"))) $sid -}}
  {{- with index (.nodes | default dict) (toString (min $nodes $f.nodes_judged)) }}{{ fail (index $f.kv.messages (int .)) }}{{ end -}}
  {{- with and $pid (index (.profile | default dict) $vid) }}{{ if hasKey . $pid }}{{ fail (index $f.kv.messages (int (index . $pid))) }}{{ end }}{{ end -}}
  {{- if and $vcls (hasKey (.vllm_version | default dict) $vcls) }}{{ fail (replace $f.vllm.mark $ver (index $f.kv.messages (int (index .vllm_version $vcls)))) }}{{ end -}}
  {{- with and $pid $vcls (index (.profile_version | default dict) $vid) }}{{ with index . $pid }}{{ if hasKey . $vcls }}{{ fail (replace $f.vllm.mark $ver (index $f.kv.messages (int (index . $vcls)))) }}{{ end }}{{ end }}{{ end -}}
  {{- $scoped := .features | default dict -}}
  {{- if hasKey $s "features" }}{{ range splitList "," (toString $s.features) }}{{ with index $scoped (trim .) }}{{ fail (index $f.kv.messages (int .)) }}{{ end }}{{ end }}{{ end -}}
{{- end -}}
{{- $floor := int (index $rhw.min_gpus $sid | default 0) -}}
{{- $gpus := mul (int (index $hwf.resources (first (without (keys $hwf.resources | sortAlpha) "cpu" "memory")))) (ternary $nodes 1 (eq $st.shape "multi_node")) -}}
{{- if and (ne $st.shape "pd_cluster") (lt $gpus $floor) }}{{ fail (printf "settings.strategy=%s on %d x %s GPUs: the %s recipe runs it on at least %d GPUs (strategy_min_gpus): add nodes" $sid $gpus $hw $r.title $floor) }}{{ end -}}
{{- if not (hasKey $r.variants $vid) }}{{ fail (printf "settings.variant=%s is not a variant of the %s recipe (it has %s)" $vid $r.title (join ", " (keys $r.variants | sortAlpha))) }}{{ end -}}
{{- with index $rhw.unsupported_variants $vid }}{{ fail . }}{{ end -}}
{{- /* a fleet (docs/fleet.md): the copies behind vllm-router or the cluster's Gateway, asked for by replicas > 1
      or a fleet setting unless settings.router is none. What the plan's rendering refuses before it resolves
      (fleet.choose, k8s_fleet.deployment_environ), in plan's words (files/facts.json fleet.refused); the
      rest below, once the deployment is known */ -}}
{{- $ff := $f.fleet -}}{{- $fr := $ff.refused -}}
{{- $front := toString ($s.router | default "vllm-router") -}}
{{- $copies := int (include "kimi.operate" . | fromJson).replicas -}}
{{- /* an autoscaled PD cluster is a PD fleet, even of one unit: each group added is a unit the fleet's router discovers (fleet.choose) */ -}}
{{- $pdScaled := and (eq $st.shape "pd_cluster") (ne (include "kimi.operate" . | fromJson).autoscaling "off") -}}
{{- if and (eq $front "none") (eq $st.shape "pd_cluster") (or (gt $copies 1) $pdScaled) }}{{ fail (index $f.kv.messages (int $fr.pd_router_none)) }}{{ end -}}
{{- $fleet := and (ne $front "none") (or (gt $copies 1) $pdScaled (hasKey $s "replica_addrs") (hasKey $s "router_selector") (hasKey $s "router_policy")) -}}
{{- if $fleet -}}
  {{- if not (hasKey $ff.policies (toString ($s.router_policy | default $ff.default_policy))) }}{{ fail (printf $fr.unknown_policy (toString $s.router_policy)) }}{{ end -}}
  {{- if hasKey $s "replica_addrs" }}{{ fail (index $f.kv.messages (int $fr.replica_addrs)) }}{{ end -}}
{{- end -}}
{{- /* KV offload (docs/kv-cache.md, core/kv.py): a Mooncake KV store's processes, or an option beside each engine */ -}}
{{- $kid := trim (toString ($s.kv_offload | default "")) -}}
{{- $kvs := dict -}}{{- $kvo := dict -}}
{{- if $kid -}}
  {{- if hasKey $f.kv.stores $kid }}{{ $kvs = index $f.kv.stores $kid }}
  {{- else if hasKey $f.kv.options $kid }}{{ $kvo = index $f.kv.options $kid }}
  {{- else }}{{ fail (printf "settings.kv_offload=%s is not a KV choice; the choices: %s. Unset it for no KV offload." $kid (join ", " (concat (keys $f.kv.options | sortAlpha) (keys $f.kv.stores | sortAlpha)))) }}{{ end -}}
  {{- range (index (index $f.tables (int (index $rhw "kv_refused"))) $kid | default list) }}{{ if has $sid (index . 1) }}{{ fail (index $f.kv.messages (int (index . 0))) }}{{ end }}{{ end -}}
  {{- $floor := (ternary $kvs $kvo (not (empty $kvs))).min_vllm_version -}}
  {{- if and $floor $ver -}}
    {{- if semverCompare (printf "<%s" $floor) $ver }}{{ fail (printf "settings.kv_offload=%s needs vLLM >= %s, but settings.vllm_version=%s: run an image built on a newer vLLM (the default tags)" $kid $floor $ver) }}{{ end -}}
  {{- end -}}
  {{- if regexMatch "(^|\\s)--kv-transfer-config(\\s|=|$)" ($s.extra_args | default "") }}{{ fail (printf "settings.kv_offload=%s sets --kv-transfer-config, and settings.extra_args sets it too: keep one" $kid) }}{{ end -}}
  {{- if and $kvs (eq $st.shape "pd_cluster") (hasKey $s "kv_instances") }}{{ fail "settings.kv_instances does not apply to settings.strategy=pd_cluster: its pools size the deployment (settings.prefill_nodes, settings.decode_nodes). Remove it." }}{{ end -}}
{{- end -}}
{{- range list "kv_instances" "instance_addrs" "mooncake_master_addr" -}}
  {{- if and (hasKey $s .) (empty $kvs) }}{{ fail (printf "settings.%s configures a KV store, but settings.kv_offload is %s: remove it, or set settings.kv_offload to a kv_store_* deployment (docs/kv-cache.md)" . (ternary (printf "%s (it runs beside each engine)" $kid) "not set" (ne $kid ""))) }}{{ end -}}
{{- end -}}
{{- /* settings.name; else the release's name (two releases never collide) */ -}}
{{- $name := $s.name | default .Release.Name -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$" $name) }}{{ fail (printf "the release name %q names the objects, but it is not a DNS label of at most 40 characters (lower-case letters, digits and '-', starting with a letter): install under another name, or set settings.name" $name) }}{{ end -}}
{{- /* settings.namespace; else the release's (helm install -n N) */ -}}
{{- $ns := $s.namespace | default .Release.Namespace -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) }}{{ fail (printf "settings.namespace=%q is not a Kubernetes namespace name" $ns) }}{{ end -}}
{{- $cacheDir := "" -}}
{{- range $f.settings }}{{ if eq .name "cache_dir" }}{{ $cacheDir = $s.cache_dir | default .default }}{{ end }}{{ end -}}
{{- $routerPort := 0 -}}
{{- range $f.settings }}{{ if eq .name "router_port" }}{{ $routerPort = int ($s.router_port | default .default) }}{{ end }}{{ end -}}
{{- $port := int ($s.port | default $d.port) -}}
{{- /* `--port N` among the vLLM arguments is every engine's port, as in plan (the user's arguments win);
      another spelling of it is left to the container, which refuses what vLLM would not take */ -}}
{{- $argPort := 0 -}}
{{- with regexFind "(^|\\s)--port(=|\\s+)[0-9]+" ($s.extra_args | default "") }}{{ $argPort = int (regexFind "[0-9]+$" .) }}{{ end -}}
{{- if $argPort }}{{ $port = $argPort }}{{ end -}}
{{- /* the image: settings.image (KIMI_IMAGE), else image.repository with image.tag or image.digest, else the hardware's published image */ -}}
{{- $image := $s.image | default $hwf.image -}}
{{- $iv := .Values.image | default dict -}}
{{- if $iv.repository -}}
  {{- if and (not $iv.tag) (not $iv.digest) }}{{ fail "image.repository needs image.tag or image.digest (sha256:...)" }}{{ end -}}
  {{- $image = printf "%s%s%s" $iv.repository (ternary (printf ":%s" $iv.tag) "" (not (empty $iv.tag))) (ternary (printf "@%s" $iv.digest) "" (not (empty $iv.digest))) -}}
  {{- if $s.image }}{{ fail "settings.image and image.repository both name the image: keep one" }}{{ end -}}
{{- else if or $iv.tag $iv.digest -}}
  {{- fail "image.tag / image.digest need image.repository" -}}
{{- end -}}
{{- /* issue 30: settings.image_digest pins it (render/deployment.image) */ -}}
{{- with $s.image_digest -}}
  {{- $named := first (splitList "@" $image) -}}
  {{- if and (contains "@" $image) (ne (last (splitList "@" $image)) .) }}{{ fail (printf "settings.image=%s names another digest than settings.image_digest=%s: keep one of them" $image .) }}{{ end -}}
  {{- $image = printf "%s@%s" $named . -}}
{{- end -}}
{{- /* the settings every container gets: the user's, the pinned choices, the addresses the deployment gives its pods */ -}}
{{- $pinned := dict "hardware" $hw "strategy" $sid -}}
{{- $eff := deepCopy $s -}}
{{- $groups := list -}}
{{- $lws := $f.defaults.lws -}}
{{- $selector := dict -}}
{{- $apiPort := $port -}}
{{- /* a KV store's master (Deployment + Service) and store (StatefulSet of one + headless Service), the
      addresses the deployment gives them (k8s_kv.deployment_environ; as in plan, they take the place
      of the settings' own) */ -}}
{{- $kvFront := list -}}
{{- $pdRouter := dict -}}{{- $pdFleet := dict -}}
{{- if $kvs -}}
  {{- $_ := set $eff "mooncake_master_addr" (printf "%s-master" $name) -}}
  {{- $_ := set $eff "mooncake_store_host" (printf "%s-store-0.%s-store" $name $name) -}}
  {{- $roles := $kvs.roles -}}
  {{- $kvFront = list (dict "kind" "Deployment" "name" (printf "%s-master" $name) "component" "master" "claim" "" "tcpService" true
        "procs" (list (dict "role" "master" "serves" false "helper" true "port" (int $roles.master.port) "gpu" false "resources" $roles.master.resources))) -}}
  {{- if $kvs.store -}}
    {{- $kvFront = append $kvFront (dict "kind" "StatefulSet" "name" (printf "%s-store" $name) "component" "store" "replicas" 1 "claims" false
          "procs" (list (dict "role" "store" "serves" false "helper" true "port" (int $roles.store.port) "gpu" false "rank" true "resources" $roles.store.resources))) -}}
  {{- end -}}
{{- end -}}
{{- if and (eq $st.shape "single") $kvs -}}
  {{- /* render/k8s_kv.py: master (Deployment + Service), store (StatefulSet of one + headless Service),
        instances (StatefulSet, each pod its claim, rank = pod index), the cache-aware router when N > 1 */ -}}
  {{- $inst := int ($s.kv_instances | default $kvs.default_instances) -}}
  {{- $_ := set $pinned "kv_instances" $inst -}}
  {{- /* the addresses the deployment gives its own pods (k8s_kv.deployment_environ); as in plan, they
        take the place of the settings' (the KIMI_CONFIG file's) addresses */ -}}
  {{- $hosts := list -}}
  {{- range $i := until $inst }}{{ $hosts = append $hosts (printf "%s-instance-%d.%s-instance" $name $i $name) }}{{ end -}}
  {{- $_ := set $eff "instance_addrs" (join "," $hosts) -}}
  {{- $groups = $kvFront -}}
  {{- $groups = append $groups (dict "kind" "StatefulSet" "name" (printf "%s-instance" $name) "component" "instance" "replicas" $inst "claims" true
        "procs" (list (dict "role" "instance" "serves" true "port" $port "gpu" true "rank" true))) -}}
  {{- if gt $inst 1 -}}
    {{- $rport := int ($s.router_port | default $kvs.roles.router.port) -}}
    {{- $groups = append $groups (dict "kind" "Deployment" "name" (printf "%s-router" $name) "component" "router" "claim" ""
          "procs" (list (dict "role" "router" "serves" true "port" $rport "gpu" false "resources" $kvs.roles.router.resources))) -}}
    {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "router" -}}
    {{- $apiPort = $rport -}}
  {{- else -}}
    {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "instance" -}}
  {{- end -}}
{{- else if eq $st.shape "single" -}}
  {{- $groups = list (dict "kind" "Deployment" "name" $name "component" "single" "claim" (printf "%s-cache" $name)
        "procs" (list (dict "role" "single" "serves" true "port" $port "gpu" true))) -}}
  {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "single" -}}
{{- else if eq $st.shape "multi_node" -}}
  {{- if lt $nodes 2 }}{{ fail (printf "settings.strategy=%s spans nodes: set settings.nodes to 2 or more" $sid) }}{{ end -}}
  {{- $_ := set $pinned "nodes" $nodes -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $procs := list (dict "role" "head" "serves" true "port" $port "gpu" true) -}}
  {{- range $i := untilStep 1 $nodes 1 }}{{ $procs = append $procs (dict "role" "worker" "serves" $st.worker_serves_http "port" $port "gpu" true) }}{{ end -}}
  {{- $groups = list (dict "kind" "LeaderWorkerSet" "name" $name "component" "head" "procs" $procs) -}}
  {{- $selector = dict $lws.name_label $name -}}
  {{- if not $st.worker_serves_http }}{{ $_ := set $selector $lws.index_label "0" }}{{ end -}}
{{- else -}}
  {{- $addrs := dict -}}
  {{- $groups = $kvFront -}}
  {{- /* a PD fleet (render/k8s_fleet.py pd_fleet): each pool's API pods by a selector of its own, every pool on the
        prefill pool's port (the router's one discovery port), each group's own pool addresses ($(LWS_GROUP_INDEX)) */ -}}
  {{- $pdTerms := list -}}{{- $pdPort := 0 -}}{{- $grouped := dict -}}
  {{- range $role := list "prefill" "decode" -}}
    {{- $key := printf "%s_nodes" $role -}}
    {{- $pools := index ($rhw.pd_pools | default dict) $vid -}}
    {{- $pool := index $pools $role -}}
    {{- $derived := $pool.nodes -}}
    {{- with index $s (printf "%s_parallelism" $role) }}{{ with index ($pool.nodes_by_parallelism | default dict) . }}{{ $derived = . }}{{ end }}{{ end -}}
    {{- $n := int (hasKey $s $key | ternary (index $s $key) $derived) -}}
    {{- if eq $n 0 }}{{ fail "A pool of 0 nodes shares one node's GPUs with the other pool, which Kubernetes cannot give to two pods. Set settings.prefill_nodes and settings.decode_nodes to 1 or more, or render the shared node for Compose: kimi-serve plan --format compose." }}{{ end -}}
    {{- $_ := set $pinned $key $n -}}
    {{- $par := index $s (printf "%s_parallelism" $role) | default (index $pools $role).parallelism -}}
    {{- if not (has $par $r.pd.parallelisms) }}{{ fail (printf "KIMI_%s_PARALLELISM=%s is not offered by the recipe's strategies; use one of %s." (upper $role) $par (join ", " $r.pd.parallelisms)) }}{{ end -}}
    {{- /* the recipe's rules for the pool (select.pool_rules), in plan's words */ -}}
    {{- $rules := index $rhw.pd_rules $role -}}{{- $layout := index $rules.layouts $par -}}
    {{- $count := int (index $hwf.resources (first (without (keys $hwf.resources | sortAlpha) "cpu" "memory"))) -}}
    {{- $poolGpus := mul $n $count -}}{{- $setting := printf "KIMI_%s" (upper $role) -}}
    {{- if $layout.unsupported -}}
      {{- $others := list -}}{{- range $m := list "tp" "tep" "dep" }}{{ if and (ne $m $par) (not (index $rules.layouts $m).unsupported) }}{{ $others = append $others $m }}{{ end }}{{ end -}}
      {{- fail (printf "The %s pool's %s layout: the %s recipe marks multi_node_%s unsupported on %s. Set %s_PARALLELISM to %s." $role $par $r.title $par $hw $setting (join " or " $others)) -}}
    {{- end -}}
    {{- if lt $poolGpus (int $layout.min_gpus) }}{{ fail (printf "The %s pool spans %d x %s GPUs, but the %s recipe runs a %s layout on at least %d (strategy_min_gpus). Set %s_NODES=%d." $role $poolGpus $hw $r.title $par (int $layout.min_gpus) $setting (div (add (int $layout.min_gpus) (sub $count 1)) $count)) }}{{ end -}}
    {{- if and $rules.tp (eq $par "dep") (gt (int $rules.tp) $count) }}{{ fail (printf "The %s recipe gives the %s pool tensor parallel size %d per data-parallel rank, but its dep layout keeps each rank on one node and a %s node gives the pool %d GPUs. Use %s." $r.title $role (int $rules.tp) $hw $count $rules.rank_way) }}{{ end -}}
    {{- if and $rules.tp (has $par (list "tp" "tep")) (ne $poolGpus (int $rules.tp)) }}{{ fail (printf "The %s recipe gives the %s pool tensor parallel size %d, but its %s layout spans %d x %s GPUs and would run TP %d, not what the recipe means. Use %s." $r.title $role (int $rules.tp) $par $poolGpus $hw $poolGpus $rules.tp_way) }}{{ end -}}
    {{- if and (gt $n 1) (kindIs "invalid" (index (index $r.pd.worker_serves_http $role) $par)) }}{{ fail (printf "the %s recipe runs no %s pool of %d nodes with %s parallelism: kimi-serve plan says why" $r.title $role $n $par) }}{{ end -}}
    {{- $lname := printf "%s-%s" $name $role -}}
    {{- $hosts := list (printf "%s-0.%s" $lname $lname) -}}
    {{- range $i := untilStep 1 $n 1 }}{{ $hosts = append $hosts (printf "%s-0-%d.%s" $lname $i $lname) }}{{ end -}}
    {{- $_ := set $addrs (printf "%s_addrs" $role) (join "," $hosts) -}}
    {{- $var := printf "$(%s)" $ff.pd.group_var -}}
    {{- $own := list (printf "%s-%s.%s" $lname $var $lname) -}}
    {{- range $i := untilStep 1 $n 1 }}{{ $own = append $own (printf "%s-%s-%d.%s" $lname $var $i $lname) }}{{ end -}}
    {{- $_ := set $grouped (printf "KIMI_%s_ADDRS" (upper $role)) (join "," $own) -}}
    {{- $rport := int (ternary $argPort (index $r.pd.ports $role) (gt $argPort 0)) -}}
    {{- if and $fleet $pdPort }}{{ $rport = $pdPort }}{{ end }}{{ $pdPort = $rport -}}
    {{- $pdTerms = append $pdTerms (printf "%s:%s=%s" $role $lws.name_label $lname) -}}
    {{- if and (gt $n 1) (not (index (index $r.pd.worker_serves_http $role) $par)) }}{{ $pdTerms = append $pdTerms (printf "%s:%s=0" $role $lws.index_label) }}{{ end -}}
    {{- $procs := list (dict "role" $role "serves" true "port" $rport "gpu" true) -}}
    {{- range $i := untilStep 1 $n 1 }}{{ $procs = append $procs (dict "role" $role "serves" (index (index $r.pd.worker_serves_http $role) $par) "port" $rport "gpu" true) }}{{ end -}}
    {{- $groups = append $groups (dict "kind" "LeaderWorkerSet" "name" $lname "component" $role "procs" $procs) -}}
  {{- end -}}
  {{- range $k, $v := $addrs }}{{ $_ := set $eff $k $v }}{{ end -}}
  {{- $_ := set $eff "iface" $d.auto_iface.KIMI_IFACE -}}
  {{- $pdRouter = dict "kind" "Deployment" "name" (printf "%s-router" $name) "component" "router" "claim" ""
        "procs" (list (dict "role" "router" "serves" true "port" $routerPort "gpu" false)) -}}
  {{- $groups = append $groups $pdRouter -}}
  {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "router" -}}
  {{- $apiPort = $routerPort -}}
  {{- $pdFleet = dict "terms" $pdTerms "grouped" $grouped -}}
{{- end -}}
{{- /* the variant runs on this hardware and fits each pool's GPUs (the resolver's memory check) */ -}}
{{- if not $s.skip_memory_check -}}
  {{- $need := float64 (index $r.variants $vid) -}}
  {{- range $g := $groups -}}
    {{- if (first $g.procs).gpu -}}
      {{- $have := mulf (len $g.procs) $hwf.vram_gb -}}
      {{- if lt $have $need }}{{ fail (printf "settings.variant=%s needs at least %.0f GB of GPU memory, but %s's %d x %s nodes hold %.0f GB: add nodes (settings.nodes, or the pool's settings.<pool>_nodes), choose another variant, or settings.skip_memory_check=true to try anyway" $vid $need $g.name (len $g.procs) $hw $have) }}{{ end -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- /* the load: plan's refusal for this load format and model form, or its start-up budget (core/loading.py) */ -}}
{{- $model := toString ($s.model | default "") -}}
{{- $form := "hub" -}}
{{- if or (hasPrefix "s3://" $model) (hasPrefix "gs://" $model) }}{{ $form = "object" }}{{ else if hasPrefix "/" $model }}{{ $form = "path" }}{{ end -}}
{{- $lf := "recipe" -}}
{{- range $f.settings }}{{ if eq .name "load_format" }}{{ $lf = toString ($s.load_format | default .default) }}{{ end }}{{ end -}}
{{- /* a named load format (or auto, for object storage, which picks one at render) needs the formats of the vLLM release */ -}}
{{- if and (ne $lf "recipe") (or (ne $lf "auto") (eq $form "object")) $ver (not (has $ver $f.loading.versions)) -}}
  {{- fail (printf $f.loading.unlisted_version $ver (join ", " $f.loading.versions)) -}}
{{- end -}}
{{- $h := $f.monitoring.health -}}
{{- $budget := int $h.start_period_s -}}
{{- with index (index $f.tables (int (index $rhw "load"))) (printf "%s|%s" $lf $form) -}}
  {{- if hasKey . "refused" }}{{ fail (index $f.kv.messages (int .refused)) }}{{ end -}}
  {{- with .per_variant -}}
    {{- $least := 0 -}}
    {{- range $g := $groups }}{{ if (first $g.procs).gpu }}{{ if or (eq $least 0) (lt (len $g.procs) $least) }}{{ $least = len $g.procs }}{{ end }}{{ end }}{{ end -}}
    {{- $want := addf $f.loading.engine_overhead_s (divf (index . $vid) (max $least 1)) -}}
    {{- $whole := int (addf $want 0.999) -}}
    {{- $budget = mul (int (ceil (divf (max $budget $whole) $h.interval_s))) (int $h.interval_s) -}}
  {{- end -}}
{{- end -}}
{{- /* a role belongs to a process of the plan (placement.check_role) */ -}}
{{- with $s.role -}}
  {{- $roles := list -}}
  {{- range $g := $groups }}{{ range $g.procs }}{{ $roles = append $roles .role }}{{ end }}{{ end -}}
  {{- with $kvo.companion }}{{ $roles = append $roles .role }}{{ end -}}
  {{- if and $fleet (eq $front "vllm-router") }}{{ $roles = append $roles "router" }}{{ end -}}
  {{- if not (has . $roles) }}{{ fail (printf "KIMI_ROLE=%s, but the %s plan has no %s process (%s): a role belongs to a pd_cluster deployment (KIMI_STRATEGY=pd_cluster) or a KV deployment (KIMI_KV_OFFLOAD, docs/kv-cache.md). Unset KIMI_ROLE, or choose one of those." . $sid . (join ", " (uniq $roles | sortAlpha))) }}{{ end -}}
{{- end -}}
{{- /* the cache directory is a mount of its own (deployment.cache_mount) */ -}}
{{- $cacheClean := clean $cacheDir -}}
{{- range $d.mounted }}{{ if or (eq $cacheClean (index . 1)) (eq $cacheClean "/") }}{{ fail (printf "KIMI_CACHE_DIR=%s is %s, which the rendered containers mount separately: the cache volume would be hidden (the download step's files lost). Choose a directory of its own, e.g. /cache." $cacheDir (ternary "the root" (index . 0) (eq $cacheClean "/"))) }}{{ end }}{{ end -}}
{{- /* copies of a KV store without pools (autoscaling._kv_store_copies) */ -}}
{{- $o := include "kimi.operate" . | fromJson -}}
{{- /* the fleet (render/k8s_fleet.py, render/gateway.py): what the plan's fleet layer refuses (fleet._check), and
      the router or the Gateway's pool in front of the copies */ -}}
{{- $fleetOut := dict -}}
{{- if $fleet -}}
  {{- $policy := toString ($s.router_policy | default $ff.default_policy) -}}
  {{- $pol := index $ff.policies $policy -}}
  {{- $isPd := eq $st.shape "pd_cluster" -}}
  {{- if $kvs }}{{ fail (index $f.kv.messages (int (index (ternary $fr.kv_store_pd $fr.kv_store $isPd) $kid))) }}{{ end -}}
  {{- with index $fr.min_replicas $policy }}{{ with index . (toString $copies) }}{{ fail (index $f.kv.messages (int .)) }}{{ end }}{{ end -}}
  {{- if and $isPd (eq $front "gateway") }}{{ fail (index $f.kv.messages (int $fr.gateway_pd)) }}{{ end -}}
  {{- /* the token-id policies need the engines' render endpoints: judged by the newest recorded vLLM grammar not newer than the version (vllm_cli.spec_for) */ -}}
  {{- $rver := $ver | default $ff.default_vllm_version -}}
  {{- if and $pol.token_ids (eq $front "vllm-router") -}}
    {{- $grammar := "" -}}{{- $oldest := "" -}}
    {{- range $v, $_ := $ff.token_ids_versions -}}
      {{- if or (not $oldest) (semverCompare (printf "<%s" $oldest) $v) }}{{ $oldest = $v }}{{ end -}}
      {{- if and (semverCompare (printf "<=%s" $rver) $v) (or (not $grammar) (semverCompare (printf ">%s" $grammar) $v)) }}{{ $grammar = $v }}{{ end -}}
    {{- end -}}
    {{- if not (index $ff.token_ids_versions ($grammar | default $oldest)) }}{{ fail (printf (index $fr.token_ids $policy) $rver) }}{{ end -}}
  {{- end -}}
  {{- if $pol.kv_events -}}
    {{- if ne $st.shape "single" }}{{ fail (printf (index $fr.kv_events $policy).spread $sid) }}{{ end -}}
    {{- fail (index $f.kv.messages (int (index $fr.kv_events $policy).discovered)) -}}
  {{- end -}}
  {{- /* the copies' API pods: the single-node pods, or each group's leader (render/fleet.selector) */ -}}
  {{- $poolLabels := list (list "app.kubernetes.io/name" $name) (list "app.kubernetes.io/component" "single") -}}
  {{- if eq $st.shape "multi_node" }}{{ $poolLabels = list (list $lws.name_label $name) (list $lws.index_label "0") }}{{ end -}}
  {{- $pool := dict -}}
  {{- range $poolLabels }}{{ $_ := set $pool (index . 0) (index . 1) }}{{ end -}}
  {{- if eq $front "vllm-router" -}}
    {{- $rp := ternary $routerPort (int ($s.router_port | default $ff.router.port)) $isPd -}}
    {{- if eq $rp (int $ff.router.metrics_port) }}{{ fail (index $f.kv.messages (int (ternary $fr.pd_metrics_port $fr.metrics_port $isPd))) }}{{ end -}}
    {{- $discover := list -}}
    {{- range $poolLabels }}{{ $discover = append $discover (printf "%s=%s" (index . 0) (index . 1)) }}{{ end -}}
    {{- if $isPd }}{{ $discover = $pdFleet.terms }}{{ end -}}
    {{- $_ := set $eff "router_selector" (join "," $discover) -}}
    {{- /* what the router's own plan needs that no other container gets (k8s_fleet._router_deployment) */ -}}
    {{- $own := list (dict "name" "KIMI_NAMESPACE" "value" $ns) (dict "name" "KIMI_REPLICAS" "value" (toString $copies)) -}}
    {{- if eq $st.shape "multi_node" }}{{ $own = append $own (dict "name" "KIMI_HEAD_ADDR" "value" (printf "%s-0.%s" $name $name)) }}{{ end -}}
    {{- $router := dict "env" $own "serviceAccount" (printf "%s-router" $name) "metricsPort" (int $ff.router.metrics_port) "metricsName" $ff.router.metrics_port_name "tokenSkip" $ff.router.token_skip -}}
    {{- if $isPd -}}
      {{- /* the PD cluster's own router is the fleet's (its port and pod size); each pool pod its group's addresses */ -}}
      {{- $_ := set $pdRouter "strategy" $ff.router.strategy -}}
      {{- $_ := set (first $pdRouter.procs) "fleet" $router -}}
      {{- $_ := set $pdFleet "groupVar" (dict "name" $ff.pd.group_var "valueFrom" (dict "fieldRef" (dict "fieldPath" $ff.pd.group_field))) -}}
    {{- else -}}
      {{- $groups = append $groups (dict "kind" "Deployment" "name" (printf "%s-router" $name) "component" "router" "claim" "" "strategy" $ff.router.strategy
            "procs" (list (dict "role" "router" "serves" true "port" $rp "gpu" false "resources" $ff.router.resources "fleet" $router))) -}}
      {{- $selector = dict "app.kubernetes.io/name" $name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" "router" -}}
      {{- $apiPort = $rp -}}
    {{- end -}}
    {{- $fleetOut = dict "router" true "serviceAccount" (printf "%s-router" $name) -}}
    {{- if $isPd }}{{ $_ := set $fleetOut "groups" $pdFleet }}{{ end -}}
  {{- else if eq $front "gateway" -}}
    {{- $selector = $pool -}}
    {{- $fleetOut = dict "gateway" true "pool" $pool "port" $port -}}
  {{- end -}}
{{- end -}}
{{- if and $kvs (ne $st.shape "pd_cluster") (or (gt (int $o.replicas) 1) (ne $o.autoscaling "off")) -}}
  {{- $asked := ternary (printf "KIMI_REPLICAS=%d" (int $o.replicas)) (printf "KIMI_AUTOSCALING=%s" $o.autoscaling) (gt (int $o.replicas) 1) -}}
  {{- fail (printf $f.kv.copies_message $kid (int ($s.kv_instances | default $kvs.default_instances)) $asked) -}}
{{- end -}}
{{- $env := list -}}
{{- range $f.settings -}}
  {{- if .passed -}}
    {{- if hasKey $pinned .name -}}{{ $env = append $env (dict "name" .env "value" (include "kimi.envValue" (index $pinned .name) | replace "$" "$$")) }}
    {{- else if hasKey $eff .name -}}{{ $env = append $env (dict "name" .env "value" (include "kimi.envValue" (index $eff .name) | replace "$" "$$")) }}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- /* issue 30, the stop sequence (render/deployment.stop): the drain every engine gets as --shutdown-timeout */ -}}
{{- $drain := 0 -}}
{{- range $f.settings }}{{ if eq .name "drain_timeout" }}{{ $drain = int (hasKey $s "drain_timeout" | ternary $s.drain_timeout .default) }}{{ end }}{{ end -}}
{{- /* what only the chart decides: Helm's labels, the service account, the token's Secret, the user's env, the cache volume */ -}}
{{- $v := .Values -}}
{{- $helmLabels := dict "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/instance" .Release.Name "app.kubernetes.io/version" (toString .Chart.AppVersion) -}}
{{- $sa := $v.serviceAccount | default dict -}}
{{- $saCreate := eq (toString $sa.create) "true" -}}
{{- $saName := ternary ($sa.name | default $name) ($sa.name | default "") $saCreate -}}
{{- $userEnv := list -}}
{{- range ($v.extraEnv | default list) -}}
  {{- if and (hasKey . "value") (regexMatch $f.secrets.env_pattern .name) -}}
    {{- fail (printf "extraEnv %s is named like a secret, and its value would be written into the pod spec: give it as valueFrom (secretKeyRef: a Secret you create), or through envFrom" .name) -}}
  {{- end -}}
  {{- $userEnv = append $userEnv . -}}
{{- end -}}
{{- $pers := $v.persistence | default dict -}}
{{- $cacheVolume := dict -}}
{{- if eq (toString $pers.enabled) "false" -}}
  {{- $cacheVolume = dict "emptyDir" dict -}}
{{- else if $pers.existingClaim -}}
  {{- $cacheVolume = dict "persistentVolumeClaim" (dict "claimName" $pers.existingClaim) -}}
{{- end -}}
{{- $hf := $v.hfToken | default dict -}}
{{- $out := dict "engineResources" (index (index ($rhw.engine_resources | default dict) $vid | default dict) $sid | default dict) "drain" $drain "name" $name "namespace" $ns "image" $image "hardware" $hw "strategy" $sid "shape" $st.shape "budget" $budget
      "pullPolicy" ($iv.pullPolicy | default "Always") "helmLabels" $helmLabels "serviceAccount" $saName
      "automountToken" (and $saCreate (eq (toString $sa.automount) "true")) "userEnv" $userEnv "envFrom" ($v.envFrom | default list)
      "tokenSecret" ($hf.secretName | default (printf "%s-hf-token" $name)) "tokenKey" ($hf.key | default $d.token.key)
      "cacheVolume" $cacheVolume "scraper" (dict "namespace" ($v.monitoring.scraper.namespace | default "monitoring") "podLabels" ($v.monitoring.scraper.podLabels | default dict))
      "groups" $groups "selector" $selector "apiPort" $apiPort "env" $env "cacheDir" $cacheDir
      "pd" (eq $st.shape "pd_cluster") "roles" (or (eq $st.shape "pd_cluster") (not (empty $kvs)))
      "companion" (ternary (dict) ($kvo.companion | default dict) (empty $kvo)) "fleet" $fleetOut -}}
{{- toJson $out -}}
{{- end -}}

{{/* kimi.scraper: (list facts ctx) -> the `from` peer of the Prometheus that scrapes the metrics ports: its
namespace (monitoring.scraper.namespace) and, when named, its pods' labels (k8s.scraper) */}}
{{- define "kimi.scraper" -}}
{{- $c := index . 1 -}}
{{- $peer := dict "namespaceSelector" (dict "matchLabels" (dict (index . 0).defaults.namespace_label $c.scraper.namespace)) -}}
{{- with $c.scraper.podLabels }}{{ $_ := set $peer "podSelector" (dict "matchLabels" .) }}{{ end -}}
{{- toJson $peer -}}
{{- end -}}

{{/* kimi.meta: (list ctx name component [annotations]) -> metadata */}}
{{- define "kimi.meta" -}}
{{- $c := index . 0 -}}
{{- $m := dict "name" (index . 1) "namespace" $c.namespace "labels" (merge (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" (index . 2)) $c.helmLabels) -}}
{{- if and (gt (len .) 3) (index . 3) }}{{ $_ := set $m "annotations" (index . 3) }}{{ end -}}
{{- toJson $m -}}
{{- end -}}

{{/* kimi.skips: (list root ctx proc) -> checkov skip annotations (k8s_pod.skip_annotations) */}}
{{- define "kimi.skips" -}}
{{- $f := (index . 0).Files.Get "files/facts.json" | fromJson -}}
{{- $c := index . 1 -}}{{- $p := index . 2 -}}
{{- $skips := dict -}}
{{- if and (not $p.serves) (not $p.helper) }}{{ $_ := set $skips "CKV_K8S_8" $f.defaults.skips.headless }}{{ $_ := set $skips "CKV_K8S_9" $f.defaults.skips.headless }}{{ end -}}
{{- if not (contains "@sha256:" $c.image) }}{{ $_ := set $skips "CKV_K8S_43" $f.defaults.skips.tag }}{{ end -}}
{{- $out := dict -}}
{{- range $i, $check := keys $skips | sortAlpha }}{{ $_ := set $out (printf "checkov.io/skip%d" (add1 $i)) (printf "%s=%s" $check (index $skips $check)) }}{{ end -}}
{{- with $p.fleet }}{{ $_ := set $out (printf "checkov.io/skip%d" (add1 (len $out))) .tokenSkip }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* kimi.probes: (list facts ctx values) -> the serving container's probes: plan's, the startup
probe sized to the launch's start-up budget, each overlaid with the chart's `probes` values */}}
{{- define "kimi.probes" -}}
{{- $d := (index . 0).defaults -}}{{- $c := index . 1 -}}{{- $v := index . 2 -}}
{{- $probes := deepCopy $d.probes -}}
{{- $h := (index . 0).monitoring.health -}}
{{- $_ := set $probes.startupProbe "failureThreshold" (int (ceil (divf $c.budget $h.interval_s))) -}}
{{- range $k, $user := ($v.probes | default dict) -}}
  {{- $key := printf "%sProbe" $k -}}
  {{- $_ := set $probes $key (merge (deepCopy $user) (index $probes $key)) -}}
{{- end -}}
{{- toJson $probes -}}
{{- end -}}

{{/* kimi.pod: (list root ctx proc claim) -> {metadata, spec} of the pod template (k8s_pod.pod_spec) */}}
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
{{- $env = append $env (dict "name" $d.token.path_env "value" (printf "%s/%s" $d.token.dir $d.token.file)) -}}
{{- $env = concat $env $c.userEnv -}}
{{- /* a fleet's router: where it discovers the copies, and how many (k8s_fleet._router_deployment) */ -}}
{{- with $p.fleet }}{{ $env = concat .env $env }}{{ end -}}
{{- /* a PD fleet's pool pod: its own group's pool addresses, the group's index read just before them from the
      pod's label (k8s_fleet._own_group; the kubelet expands $(NAME) of an earlier variable) */ -}}
{{- with $c.fleet.groups -}}{{- if hasKey .grouped (printf "KIMI_%s_ADDRS" (upper $p.role)) -}}
  {{- $og := . -}}{{- $grouped := list -}}
  {{- range $env -}}
    {{- if hasKey $og.grouped .name -}}
      {{- if not (has $og.groupVar $grouped) }}{{ $grouped = append $grouped $og.groupVar }}{{ end -}}
      {{- $grouped = append $grouped (dict "name" .name "value" (index $og.grouped .name)) -}}
    {{- else }}{{ $grouped = append $grouped . }}{{ end -}}
  {{- end -}}
  {{- $env = $grouped -}}
{{- end -}}{{- end -}}
{{- $amounts := deepCopy ($p.resources | default (ternary ($c.engineResources | default $hwf.resources) $f.router.resources $p.gpu)) -}}
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
{{- $mounts := list -}}{{- $volumes := list -}}
{{- range $d.scratch }}{{ $mounts = append $mounts (dict "name" (index . 0) "mountPath" (index . 1)) }}{{ $volumes = append $volumes (dict "name" (index . 0) "emptyDir" dict) }}{{ end -}}
{{- $mounts = append $mounts (dict "name" $d.volumes.token "mountPath" $d.token.dir "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" $d.volumes.token "secret" (dict "secretName" $c.tokenSecret "optional" true "defaultMode" $d.token.mode "items" (list (dict "key" $c.tokenKey "path" $d.token.file)))) -}}
{{- if $p.gpu -}}
  {{- $mounts = concat $mounts (list (dict "name" $d.volumes.cache "mountPath" $c.cacheDir) (dict "name" $d.volumes.shm "mountPath" "/dev/shm")) -}}
  {{- $volumes = append $volumes (dict "name" $d.volumes.shm "emptyDir" (dict "medium" "Memory")) -}}
  {{- if $claim }}{{ $volumes = append $volumes (dict "name" $d.volumes.cache "persistentVolumeClaim" (dict "claimName" $claim)) }}
  {{- else if $c.cacheVolume }}{{ $volumes = append $volumes (merge (dict "name" $d.volumes.cache) $c.cacheVolume) }}{{ end -}}
{{- end -}}
{{- $container := dict "name" $d.containers.server "image" $c.image "imagePullPolicy" $c.pullPolicy "terminationMessagePolicy" "FallbackToLogsOnError" "env" $env "resources" $resources "securityContext" (deepCopy $d.container_security) "volumeMounts" $mounts -}}
{{- with $c.envFrom }}{{ $_ := set $container "envFrom" . }}{{ end -}}
{{- if $p.serves -}}
  {{- $_ := set $container "ports" (list (dict "name" "http" "containerPort" $p.port)) -}}
  {{- with $p.fleet }}{{ $_ := set $container "ports" (append $container.ports (dict "name" .metricsName "containerPort" .metricsPort)) }}{{ end -}}
  {{- range $k, $probe := (include "kimi.probes" (list $f $c $v) | fromJson) }}{{ $_ := set $container $k $probe }}{{ end -}}
{{- else if $p.helper -}}
  {{- /* a KV helper: its TCP port, checked by `kimi-serve healthcheck` */ -}}
  {{- $_ := set $container "ports" (list (dict "name" "tcp" "containerPort" $p.port)) -}}
  {{- range $k, $probe := $d.helper_probes }}{{ $_ := set $container $k (deepCopy $probe) }}{{ end -}}
{{- end -}}
{{- /* issue 30: preStop pause (through the drain for a process that serves no client), grace = pause + drain + margin */ -}}
{{- $stop := $d.stop -}}
{{- $grace := add $stop.pause_s $c.drain $stop.margin_s -}}
{{- $_ := set $container "lifecycle" (dict "preStop" (dict "sleep" (dict "seconds" (ternary $stop.pause_s (add $stop.pause_s $c.drain) (eq $p.serves true))))) -}}
{{- range $k, $x := $d.container_extra }}{{ $_ := set $container $k (deepCopy $x) }}{{ end -}}
{{- $containers := list $container -}}
{{- with $c.companion -}}{{- if $p.gpu -}}
  {{- /* LMCache's server beside the engine (k8s_kv.add_companions): bound to the pod, sharing its /dev/shm */ -}}
  {{- $cenv := concat (append (deepCopy $settingsEnv) (dict "name" "KIMI_ROLE" "value" .role)) $c.userEnv -}}
  {{- $cmounts := list -}}
  {{- range $d.scratch }}{{ $cmounts = append $cmounts (dict "name" (index . 0) "mountPath" (index . 1)) }}{{ end -}}
  {{- $cmounts = append $cmounts (dict "name" $d.volumes.shm "mountPath" "/dev/shm") -}}
  {{- $companion := dict "name" .role "image" $c.image "imagePullPolicy" $c.pullPolicy "terminationMessagePolicy" "FallbackToLogsOnError" "env" $cenv
        "resources" (dict "limits" (deepCopy .resources) "requests" (deepCopy .resources))
        "securityContext" (deepCopy $d.container_security) "volumeMounts" $cmounts -}}
  {{- with $c.envFrom }}{{ $_ := set $companion "envFrom" . }}{{ end -}}
  {{- range $k, $probe := $d.helper_probes }}{{ $_ := set $companion $k (deepCopy $probe) }}{{ end -}}
  {{- $_ := set $companion "lifecycle" (dict "preStop" (dict "sleep" (dict "seconds" (add $stop.pause_s $c.drain)))) -}}
  {{- $containers = append $containers $companion -}}
{{- end -}}{{- end -}}
{{- $podSec := ternary (deepCopy $hwf.pod_security) (deepCopy $f.router.pod_security) $p.gpu -}}
{{- $spec := dict "enableServiceLinks" false "automountServiceAccountToken" $c.automountToken "securityContext" $podSec "containers" $containers "volumes" $volumes -}}
{{- with $c.serviceAccount }}{{ $_ := set $spec "serviceAccountName" . }}{{ end -}}
{{- /* a fleet's router lists and watches the copies' pods with its own ServiceAccount's token (its Role) */ -}}
{{- with $p.fleet }}{{ $_ := set $spec "serviceAccountName" .serviceAccount }}{{ $_ := set $spec "automountServiceAccountToken" true }}{{ end -}}
{{- $_ := set $spec "terminationGracePeriodSeconds" $grace -}}
{{- if $p.gpu -}}
  {{- $dmounts := list -}}
  {{- range $mounts }}{{ if ne .mountPath "/dev/shm" }}{{ $dmounts = append $dmounts . }}{{ end }}{{ end -}}
  {{- $dres := dict -}}
  {{- range $kind, $am := $resources }}{{ $_ := set $dres $kind (pick $am "cpu" "memory") }}{{ end -}}
  {{- $download := dict "name" $d.containers.download "image" $c.image "imagePullPolicy" $c.pullPolicy "terminationMessagePolicy" "FallbackToLogsOnError" "args" (list "download") "env" $env "resources" $dres "securityContext" (deepCopy $d.container_security) "volumeMounts" $dmounts -}}
  {{- with $c.envFrom }}{{ $_ := set $download "envFrom" . }}{{ end -}}
  {{- $_ := set $spec "initContainers" (list $download) -}}
  {{- $_ := set $spec "nodeSelector" (merge (deepCopy ($v.nodeSelector | default dict)) $hwf.node_selector) -}}
{{- end -}}
{{- range $k, $x := $d.pod_extra }}{{ $_ := set $spec $k (deepCopy $x) }}{{ end -}}
{{- with $v.tolerations }}{{ $_ := set $spec "tolerations" . }}{{ end -}}
{{- with $v.affinity }}{{ $_ := set $spec "affinity" . }}{{ end -}}
{{- with $v.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end -}}
{{- $labels := merge (dict "app.kubernetes.io/name" $c.name "app.kubernetes.io/part-of" "kimi-serve" "app.kubernetes.io/component" $p.role) (deepCopy ($v.podLabels | default dict)) $c.helmLabels -}}
{{- $meta := dict "labels" $labels -}}
{{- $ann := merge (deepCopy ($v.podAnnotations | default dict)) (include "kimi.skips" (list $root $c $p) | fromJson) -}}
{{- if $ann }}{{ $_ := set $meta "annotations" $ann }}{{ end -}}
{{- toJson (dict "metadata" $meta "spec" $spec) -}}
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
