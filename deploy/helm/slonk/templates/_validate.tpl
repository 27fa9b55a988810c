{{/* Rules the schema cannot state. Each failure names the value to change. */}}
{{- define "slonk.validate" -}}
{{- $db := .Values.accounting.database -}}
{{- if and .Values.accounting.enabled $db.host (not $db.existingSecret) -}}
{{- fail "accounting.database.existingSecret: an external accounting.database.host needs a Secret with key password (slurmdbd's StoragePass)" -}}
{{- end -}}
{{- if not .Values.pools -}}
{{- fail "pools: at least one worker node pool is required (pools: [{name: gpu, replicas: 2, ...}])" -}}
{{- end -}}
{{- $reserved := list "slurmctld" "slurmd" "login" "coordinator" "agent" "mosquitto" "mosquitto-admin" "munge" "slurm-config" "slurmdbd" "slurmdbd-config" "mariadb" "accounting-db" -}}
{{- $seen := dict -}}
{{- $margin := int .Values.workers.prestop.marginSeconds -}}
{{- range $pool := .Values.pools -}}
{{- if hasKey $seen $pool.name -}}
{{- fail (printf "pools: duplicate pool name %q: SLURM node names are the pod names %s-%s-<i>, so two pools of that name would declare the same nodes twice" $pool.name $.Release.Name $pool.name) -}}
{{- end -}}
{{- $_ := set $seen $pool.name true -}}
{{- if has $pool.name $reserved -}}
{{- fail (printf "pools: pool name %q is reserved (it would collide with the chart's %s-%s objects); choose another" $pool.name $.Release.Name $pool.name) -}}
{{- end -}}
{{- $sts := include "slonk.poolName" (dict "root" $ "pool" $pool) -}}
{{- if gt (len $sts) 52 -}}
{{- fail (printf "pools: StatefulSet name %q (release-pool) is %d characters; at most 52 keep pod and SLURM node names valid hostnames" $sts (len $sts)) -}}
{{- end -}}
{{- $hyst := merge (dict) (($pool.health | default dict).hysteresis | default dict) ($.Values.agent.health.hysteresis | default dict) -}}
{{- if and (hasKey $hyst "fail_n") (hasKey $hyst "window_m") (gt (int $hyst.fail_n) (int $hyst.window_m)) -}}
{{- fail (printf "pools[%s]: health hysteresis fail_n (%d) must not exceed window_m (%d): the agent would refuse it and exit" $pool.name (int $hyst.fail_n) (int $hyst.window_m)) -}}
{{- end -}}
{{- $grace := int (include "slonk.poolGrace" (dict "root" $ "pool" $pool)) -}}
{{- if le $grace $margin -}}
{{- fail (printf "pools[%s]: terminationGracePeriodSeconds (%d) must be longer than workers.prestop.marginSeconds (%d): slonkd prestop needs the margin to requeue jobs and mark the node DOWN before the kubelet kills slurmd" $pool.name $grace $margin) -}}
{{- end -}}
{{- $ckpt := include "slonk.poolCheckpoint" (dict "root" $ "pool" $pool) | fromJson -}}
{{- if and $ckpt.signal (le $grace (add $margin (int $ckpt.windowSeconds))) -}}
{{- fail (printf "pools[%s]: terminationGracePeriodSeconds (%d) must be longer than %s (%d) plus workers.prestop.marginSeconds (%d): the job needs the whole window to checkpoint before slonkd prestop requeues it" $pool.name $grace $ckpt.windowFrom (int $ckpt.windowSeconds) $margin) -}}
{{- end -}}
{{- end -}}
{{- $pc := .Values.priorityClasses -}}
{{- if and $pc.create (not (and (gt (int $pc.control) (int $pc.serving)) (gt (int $pc.serving) (int $pc.training)))) -}}
{{- fail (printf "priorityClasses: need control (%d) > serving (%d) > training (%d): serving must preempt workers, never SLURM's own pods" (int $pc.control) (int $pc.serving) (int $pc.training)) -}}
{{- end -}}
{{- if hasKey .Values.slurm.config "TopologyPlugin" -}}
{{- fail "slurm.config: set the topology plugin with topology.plugin (none, tree or block), not slurm.config.TopologyPlugin: the coordinator's topology settings and the seed topology.conf follow it" -}}
{{- end -}}
{{- if and .Values.tls.secretName .Values.tls.issuer.name -}}
{{- fail "tls.issuer.name: set tls.secretName (a Secret you bring) or tls.issuer (cert-manager writes one), not both" -}}
{{- end -}}
{{- if and .Values.tls.issuer.name (not .Values.tls.enabled) -}}
{{- fail "tls.issuer.name: set with tls.enabled false, where nothing would use the certificate; unset it, or turn TLS on" -}}
{{- end -}}
{{- if gt (len .Release.Name) 30 -}}
{{- fail (printf "release name %q is longer than 30 characters: it prefixes every pod and SLURM node name" .Release.Name) -}}
{{- end -}}
{{- end -}}
