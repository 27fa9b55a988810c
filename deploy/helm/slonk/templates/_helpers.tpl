{{/* Names: namespaced objects are <release>-<part>; cluster-scoped ones carry the
namespace too (<namespace>-<release>-<part>) so parallel installs never collide. */}}
{{- define "slonk.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "slonk.clusterPrefix" -}}{{ printf "%s-%s" .Release.Namespace .Release.Name }}{{- end -}}
{{- define "slonk.controller" -}}{{ printf "%s-slurmctld" .Release.Name }}{{- end -}}
{{- define "slonk.workersService" -}}{{ printf "%s-slurmd" .Release.Name }}{{- end -}}
{{- define "slonk.login" -}}{{ printf "%s-login" .Release.Name }}{{- end -}}
{{- define "slonk.coordinator" -}}{{ printf "%s-coordinator" .Release.Name }}{{- end -}}
{{- define "slonk.agent" -}}{{ printf "%s-agent" .Release.Name }}{{- end -}}
{{- define "slonk.mosquitto" -}}{{ printf "%s-mosquitto" .Release.Name }}{{- end -}}
{{- define "slonk.slurmConfig" -}}{{ printf "%s-slurm-config" .Release.Name }}{{- end -}}
{{- define "slonk.mungeSecret" -}}{{ .Values.munge.existingSecret | default (printf "%s-munge" .Release.Name) }}{{- end -}}
{{- define "slonk.nudgeSecret" -}}{{ .Values.coordinator.slurmTriggers.mqttSecret | default (printf "%s-slurmctld-mqtt" .Release.Name) }}{{- end -}}
{{- define "slonk.mqttAdminSecret" -}}{{ .Values.mosquitto.admin.existingSecret | default (printf "%s-mosquitto-admin" .Release.Name) }}{{- end -}}
{{- define "slonk.poolName" -}}{{ printf "%s-%s" .root.Release.Name .pool.name }}{{- end -}}

{{- define "slonk.priorityClass" -}}
{{- printf "%s-%s" (include "slonk.clusterPrefix" .root) .tier -}}
{{- end -}}

{{- define "slonk.labels" -}}
app.kubernetes.io/name: slonk
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: {root, component}. */}}
{{- define "slonk.selector" -}}
app.kubernetes.io/name: slonk
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "slonk.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* The FQDN of pod <pod> behind headless Service <svc>. */}}
{{- define "slonk.podFQDN" -}}
{{- printf "%s.%s.%s.svc.%s" .pod .svc .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* Hostlist of a pool's SLURM nodes, e.g. rel-gpu-[0-3]: {root, pool}. */}}
{{- define "slonk.poolHostlist" -}}
{{- $n := int .pool.replicas -}}
{{- $base := include "slonk.poolName" . -}}
{{- if eq $n 1 -}}{{ printf "%s-0" $base }}{{- else -}}{{ printf "%s-[0-%d]" $base (sub $n 1) }}{{- end -}}
{{- end -}}

{{- define "slonk.poolGrace" -}}
{{- .pool.terminationGracePeriodSeconds | default .root.Values.workers.terminationGracePeriodSeconds | int -}}
{{- end -}}

{{/* A pool's checkpoint before requeue as JSON {signal, windowSeconds, windowFrom}: the pool's
own pools[].checkpoint keys over workers.prestop.checkpoint, key by key (a key the pool sets
wins even when empty: signal "" turns the release's checkpoint off for that pool);
windowFrom names the value the window came from, for messages. {root, pool}. */}}
{{- define "slonk.poolCheckpoint" -}}
{{- $rel := .root.Values.workers.prestop.checkpoint | default dict -}}
{{- $own := .pool.checkpoint | default dict -}}
{{- $signal := ternary $own.signal $rel.signal (hasKey $own "signal") -}}
{{- $window := ternary $own.windowSeconds $rel.windowSeconds (hasKey $own "windowSeconds") -}}
{{- $from := ternary (printf "pools[%s].checkpoint.windowSeconds" .pool.name) "workers.prestop.checkpoint.windowSeconds" (hasKey $own "windowSeconds") -}}
{{- toJson (dict "signal" ($signal | default "") "windowSeconds" (int ($window | default 0)) "windowFrom" $from) -}}
{{- end -}}

{{- define "slonk.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Prometheus scrape annotations, behind metrics.prometheusAnnotations: {root, port}. */}}
{{- define "slonk.scrapeAnnotations" -}}
{{- if .root.Values.metrics.prometheusAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- with .scheme }}
prometheus.io/scheme: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* TLS (tls.enabled): the broker's one port, the API's scheme, where the Secret is mounted. */}}
{{- define "slonk.mqttPort" -}}{{ if .Values.tls.enabled }}{{ .Values.mosquitto.tlsPort }}{{ else }}{{ .Values.mosquitto.port }}{{ end }}{{- end -}}
{{- define "slonk.apiScheme" -}}{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}{{- end -}}
{{- define "slonk.tlsDir" -}}/etc/slonk/tls{{- end -}}
{{- define "slonk.coordinatorHost" -}}{{ printf "%s.%s.svc.%s" (include "slonk.coordinator" .) .Release.Namespace .Values.clusterDomain }}{{- end -}}

{{/* The TLS Secret (ca.crt, tls.crt, tls.key): the site's tls.secretName, else <release>-tls,
which the secrets Job makes once (a new CA and its server certificate) or, with tls.issuer,
cert-manager's Certificate writes. */}}
{{- define "slonk.tlsSecret" -}}{{ .Values.tls.secretName | default (printf "%s-tls" .Release.Name) }}{{- end -}}
{{/* The host names that certificate must carry (JSON list): every name a client may dial
mosquitto and the coordinator's API by. The coordinator dials the broker by its short name,
the agents and slurmctld by its full one; `slonkd status` checks the API's full name. */}}
{{- define "slonk.tlsDnsNames" -}}
{{- $names := list -}}
{{- range $svc := list (include "slonk.mosquitto" .) (include "slonk.coordinator" .) -}}
{{- $ns := printf "%s.%s" $svc $.Release.Namespace -}}
{{- $names = concat $names (list $svc $ns (printf "%s.svc" $ns) (printf "%s.svc.%s" $ns $.Values.clusterDomain)) -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{- define "slonk.topologyConfigMap" -}}{{ printf "%s-topology" .Release.Name }}{{- end -}}

{{/* Volumes every SLURM pod mounts: the config (with the coordinator's topology.conf once
it exists: the chart never creates that ConfigMap) and the munge key. */}}
{{- define "slonk.slurmVolumes" -}}
- name: slurm-config
  projected:
    sources:
      - configMap:
          name: {{ include "slonk.slurmConfig" . }}
      - configMap:
          name: {{ include "slonk.topologyConfigMap" . }}
          optional: true
- name: munge-key
  secret:
    secretName: {{ include "slonk.mungeSecret" . }}
    defaultMode: 0400
- name: munge-run
  emptyDir:
    medium: Memory
{{- end -}}

{{- define "slonk.slurmMounts" -}}
- name: slurm-config
  mountPath: /etc/slurm
  readOnly: true
- name: munge-key
  mountPath: /etc/slonk/munge
  readOnly: true
- name: munge-run
  mountPath: /run/munge
{{- end -}}

{{- define "slonk.homeEnabled" -}}
{{- if or .Values.home.nfs.server .Values.home.existingClaim }}true{{ end -}}
{{- end -}}

{{- define "slonk.homeVolume" -}}
{{- if .Values.home.existingClaim }}
- name: home
  persistentVolumeClaim:
    claimName: {{ .Values.home.existingClaim }}
{{- else if .Values.home.nfs.server }}
- name: home
  nfs:
    server: {{ .Values.home.nfs.server }}
    path: {{ .Values.home.nfs.path }}
{{- end }}
{{- end -}}

{{/* Downward-API identity of a worker pod, shared by slurmd (prestop) and the agent (the
SLURM node is the pod's name: both default to POD_NAME; the cluster's name is in the agent's
settings file). */}}
{{- define "slonk.workerEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: SLURM_CONF
  value: /etc/slurm/slurm.conf
{{- end -}}

{{/* A slurm.conf value: whole numbers as integers (YAML numbers arrive as float64). */}}
{{- define "slonk.confValue" -}}
{{- if kindIs "float64" . -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{- define "slonk.agentConfigMap" -}}{{ printf "%s-agent" (include "slonk.poolName" .) }}{{- end -}}
{{- define "slonk.coordinatorState" -}}{{ printf "%s-state" (include "slonk.coordinator" .) }}{{- end -}}

{{/* Every SLURM node of every pool as comma-joined hostlists ("" when there is none). */}}
{{- define "slonk.allHostlists" -}}
{{- $lists := list -}}
{{- range $pool := .Values.pools -}}
{{- if gt (int $pool.replicas) 0 -}}
{{- $lists = append $lists (include "slonk.poolHostlist" (dict "root" $ "pool" $pool)) -}}
{{- end -}}
{{- end -}}
{{- join "," $lists -}}
{{- end -}}

{{/* The agent's JSON settings of one pool (SLONKD_CONFIG): {root, pool}. Derived defaults,
then agent.health.checks, then the pool's health.checks, key by key (a table replaces a
table whole, as the agent reads it). Only keys slonkd/cli/agent.py accepts: the schema
refuses any other, and tests/unit/test_chart_render.py feeds this to the agent's loader. */}}
{{- define "slonk.agentConfig" -}}
{{- $root := .root -}}
{{- $pool := .pool -}}
{{- $health := $root.Values.agent.health -}}
{{- $checks := dict "expected_gpus" (int $pool.gpus) "slurmd_port" (int $root.Values.slurm.slurmdPort) -}}
{{- if include "slonk.homeEnabled" $root -}}
{{- $_ := set $checks "mounts" (list $root.Values.home.mountPath) -}}
{{- end -}}
{{- if $health.hostSysfs -}}
{{- $_ := set $checks "sysfs_root" "/host/sys" -}}
{{- end -}}
{{- $poolHealth := $pool.health | default dict -}}
{{- range $k, $v := ($health.checks | default dict) }}{{ $_ := set $checks $k $v }}{{ end -}}
{{- range $k, $v := ($poolHealth.checks | default dict) }}{{ $_ := set $checks $k $v }}{{ end -}}
{{- $hyst := dict -}}
{{- range $k, $v := ($health.hysteresis | default dict) }}{{ $_ := set $hyst $k (int $v) }}{{ end -}}
{{- range $k, $v := ($poolHealth.hysteresis | default dict) }}{{ $_ := set $hyst $k (int $v) }}{{ end -}}
{{- $doc := dict "cluster" $root.Values.clusterName "health" $checks "metrics_port" (int $root.Values.agent.metricsPort) -}}
{{- if $hyst }}{{ $_ := set $doc "hysteresis" $hyst }}{{ end -}}
{{- $doc = mustMergeOverwrite $doc (deepCopy ($root.Values.agent.config | default dict)) -}}
{{- toPrettyJson (dict "agent" $doc) -}}
{{- end -}}

{{/* The coordinator's JSON settings (SLONKD_CONFIG): the "coordinator" section of slonkd's
configuration tree (`slonkd config schema coordinator`). Lease timing keeps client-go's proportions (15/10/2 s). */}}
{{- define "slonk.coordinatorConfig" -}}
{{- $c := .Values.coordinator -}}
{{- $lease := int $c.leaseDurationSeconds -}}
{{- $doc := dict
  "cluster" .Values.clusterName
  "pod_selector" (printf "app.kubernetes.io/instance=%s,app.kubernetes.io/component=slurmd" .Release.Name)
  "lease_name" (include "slonk.coordinator" .)
  "lease_duration_s" $lease
  "policy" (dict
    "failure_grace_s" (int $c.failureGraceSeconds)
    "revalidation" (dict
      "enabled" $c.revalidation.enabled
      "timeout_s" (int $c.revalidation.timeoutSeconds)
      "recheck_s" (int $c.revalidation.recheckSeconds)
      "required" $c.revalidation.checks))
  "renew_deadline_s" (divf (mul $lease 2) 3)
  "retry_period_s" (divf (mul $lease 2) 15)
  "state_name" (include "slonk.coordinatorState" .)
  "api_port" (int $c.apiPort)
  "metrics_port" (int $c.metricsPort)
  "audit_path" "/var/lib/slonkd/audit/audit.jsonl"
  "audit_max_bytes" (int64 $c.audit.maxBytes)
  "audit_keep" (int $c.audit.keep)
  "max_out" (int $c.budget.maxOut)
  "max_out_percent" $c.budget.maxOutPercent
  "mass_percent" $c.budget.massPercent
  "dry_run" $c.dryRun
  "fleet_metrics" $c.fleetMetrics.enabled
  "sdiag_s" $c.fleetMetrics.sdiagSeconds
  "quarantine_alert_s" (int $c.quarantine.alertAfterSeconds)
-}}
{{- $t := .Values.topology -}}
{{- if ne $t.plugin "none" -}}
{{- $topo := dict
  "plugin" $t.plugin
  "configmap" (include "slonk.topologyConfigMap" .)
  "configmap_key" "topology.conf"
  "slurmctld_copy" "/etc/slurm/topology.conf"
  "debounce_s" $t.debounceSeconds
  "max_delay_s" $t.maxDelaySeconds
  "resync_s" $t.resyncSeconds
  "copy_timeout_s" $t.copyTimeoutSeconds
  "min_reconfigure_interval_s" $t.minReconfigureIntervalSeconds
-}}
{{- if eq $t.plugin "tree" -}}
{{- $_ := set $topo "tree_keys" $t.treeKeys -}}
{{- else -}}
{{- $_ := set $topo "block_key" $t.blockKey -}}
{{- with $t.blockSizes }}{{ $_ := set $topo "block_sizes" (list) }}{{ range . }}{{ $_ := set $topo "block_sizes" (append $topo.block_sizes (int .)) }}{{ end }}{{ end -}}
{{- end -}}
{{- $_ := set $doc "topology" $topo -}}
{{- end -}}
{{- if .Values.coordinator.slurmTriggers.enabled -}}
{{- $_ := set $doc "trigger_program" .Values.coordinator.slurmTriggers.program -}}
{{- end -}}
{{- $jb := .Values.coordinator.jobBlame -}}
{{- if $jb.enabled -}}
{{- $codes := list -}}{{- range $jb.infrastructureExitCodes }}{{ $codes = append $codes (int .) }}{{ end -}}
{{- $_ := set $doc "job_blame" (dict
  "min_failures" (int $jb.minFailures)
  "window_failures" (int $jb.windowFailures)
  "max_p_value" (float64 $jb.maxPValue)
  "infrastructure_exit_codes" $codes
  "exit_code_min_users" (int (default 2 $jb.exitCodeMinUsers))
  "poll_s" $jb.pollSeconds) -}}
{{- end -}}
{{- /* Checkpoint before requeue: a rollout leaves the requeue to the preStop hook, which
signals the jobs first (the coordinator cannot see which batch shells trap the signal). The
setting is the coordinator's, one for all pools: on when any pool has a signal (a pool
without one then has its hook requeue the jobs, unsignalled, at the end of its grace). */ -}}
{{- $anyCheckpoint := false -}}
{{- range $pool := .Values.pools -}}
{{- if (include "slonk.poolCheckpoint" (dict "root" $ "pool" $pool) | fromJson).signal -}}
{{- $anyCheckpoint = true -}}
{{- end -}}
{{- end -}}
{{- /* Each pool's mode (observe, quarantine, full; docs/operations.md "Adopting slonkd in
stages"): the initial one, `slonkd mode POOL MODE` switches it at run time. */ -}}
{{- $modes := dict -}}
{{- range $pool := .Values.pools -}}
{{- $_ := set $modes $pool.name (default "full" $pool.mode) -}}
{{- end -}}
{{- $_ := set $doc "pool_modes" $modes -}}
{{- if and .Values.workers.prestop.enabled $anyCheckpoint -}}
{{- $_ := set $doc "rollout" (dict "requeue_in_prestop" true) -}}
{{- end -}}
{{- /* Every other key of the section, as `slonkd config schema coordinator --chart` lists
them: merged over the above (a table key by key: policy keeps the chart's graces next to an
operator's remediate). */ -}}
{{- $doc = mustMergeOverwrite $doc (deepCopy (.Values.coordinator.config | default dict)) -}}
{{- toPrettyJson (dict "coordinator" $doc) -}}
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT for the API clients (agent, coordinator) when
kubernetesService.host is set; explicit env wins over the kubelet's service variables. */}}
{{- define "slonk.kubernetesServiceEnv" -}}
{{- with .Values.kubernetesService.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.kubernetesService.port | int | quote }}
{{- end }}
{{- end -}}
