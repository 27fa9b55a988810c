{{/* The Secrets made once (secrets.yaml): each one the chart needs that no existingSecret (or
mqttSecret, or external database, or tls.secretName or tls.issuer) names, as the JSON spec of
`slonkd secrets ensure` (slonkd/core/secret_spec.py): {"secrets": [{name, labels, data: {key:
how}}]}, and for TLS {name, labels, tls: {dnsNames}} (a new CA and its server certificate).
No value is drawn here: the Job draws them, once, when the Secret is absent. */}}
{{/* "true" when the Job makes the TLS Secret: TLS on, and neither a Secret nor an issuer. */}}
{{- define "slonk.tlsMadeOnce" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) (not .Values.tls.issuer.name) }}true{{ end -}}
{{- end -}}

{{- define "slonk.secretsMadeOnce" -}}
{{- $labels := dict "app.kubernetes.io/name" "slonk" "app.kubernetes.io/managed-by" "slonkd" "slonk.dev/release" .Release.Name -}}
{{- $list := list -}}
{{- if not .Values.munge.existingSecret -}}
{{- $list = append $list (dict "name" (include "slonk.mungeSecret" .) "labels" $labels "data" (dict "munge.key" (dict "randomBytes" 1024))) -}}
{{- end -}}
{{- if not .Values.mosquitto.admin.existingSecret -}}
{{- $list = append $list (dict "name" (include "slonk.mqttAdminSecret" .) "labels" $labels "data" (dict "username" (dict "value" .Values.mosquitto.admin.username) "password" (dict "randomAlphanumeric" 32))) -}}
{{- end -}}
{{- $trig := .Values.coordinator.slurmTriggers -}}
{{- if and $trig.enabled (not $trig.mqttSecret) -}}
{{- $list = append $list (dict "name" (include "slonk.nudgeSecret" .) "labels" $labels "data" (dict "username" (dict "value" "slurmctld-nudge") "password" (dict "randomAlphanumeric" 32))) -}}
{{- end -}}
{{- $db := .Values.accounting.database -}}
{{- if and .Values.accounting.enabled (not $db.host) (not $db.existingSecret) -}}
{{- $list = append $list (dict "name" (include "slonk.accountingSecret" .) "labels" $labels "data" (dict "password" (dict "randomAlphanumeric" 32))) -}}
{{- end -}}
{{- if include "slonk.tlsMadeOnce" . -}}
{{- $list = append $list (dict "name" (include "slonk.tlsSecret" .) "labels" $labels "tls" (dict "dnsNames" (include "slonk.tlsDnsNames" . | fromJsonArray))) -}}
{{- end -}}
{{- toJson (dict "secrets" $list) -}}
{{- end -}}

{{- define "slonk.secretsJob" -}}{{ printf "%s-secrets" .Release.Name }}{{- end -}}

{{/* Annotations of the Job and of its ServiceAccount, Role and RoleBinding ({root, weight}):
a Helm pre-install/pre-upgrade hook and an Argo CD PreSync hook, the account (weight -10)
before the Job (0); deleted once they succeeded, or before the next run made anew. */}}
{{- define "slonk.secretsHook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
argocd.argoproj.io/hook: PreSync
argocd.argoproj.io/sync-wave: {{ .weight | quote }}
argocd.argoproj.io/hook-delete-policy: BeforeHookCreation,HookSucceeded
{{- end -}}
