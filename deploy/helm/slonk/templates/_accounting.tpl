{{/* Names of the accounting objects (accounting.enabled; see accounting.yaml). */}}
{{- define "slonk.slurmdbd" -}}{{ printf "%s-slurmdbd" .Release.Name }}{{- end -}}
{{- define "slonk.mariadb" -}}{{ printf "%s-mariadb" .Release.Name }}{{- end -}}
{{- define "slonk.accountingSecret" -}}{{ .Values.accounting.database.existingSecret | default (printf "%s-accounting-db" .Release.Name) }}{{- end -}}

{{/* The database slurmdbd uses: the external host, else the chart's MariaDB pod. */}}
{{- define "slonk.accountingDbHost" -}}
{{- $mariadb := include "slonk.mariadb" . -}}
{{- .Values.accounting.database.host | default (include "slonk.podFQDN" (dict "root" . "pod" (printf "%s-0" $mariadb) "svc" $mariadb)) -}}
{{- end -}}

{{/* slurm.conf keys that send records to slurmdbd (merged before slurm.config). */}}
{{- define "slonk.accountingConf" -}}
{{- $dbd := include "slonk.slurmdbd" . -}}
{{- $conf := dict
  "AccountingStorageType" "accounting_storage/slurmdbd"
  "AccountingStorageHost" (include "slonk.podFQDN" (dict "root" . "pod" (printf "%s-0" $dbd) "svc" $dbd))
  "AccountingStoragePort" .Values.accounting.slurmdbdPort
  "JobAcctGatherType" "jobacct_gather/linux"
-}}
{{- toJson $conf -}}
{{- end -}}

{{/* slurmdbd.conf without StoragePass (the init container appends it from the Secret). */}}
{{- define "slonk.slurmdbdConf" -}}
{{- $db := .Values.accounting.database -}}
AuthType=auth/munge
DbdHost={{ include "slonk.slurmdbd" . }}-0
DbdPort={{ .Values.accounting.slurmdbdPort }}
SlurmUser=slurm
PidFile=/run/slurmdbd/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost={{ include "slonk.accountingDbHost" . }}
StoragePort={{ $db.port }}
StorageUser={{ $db.user }}
StorageLoc={{ $db.name }}
{{- end -}}

{{/* slurmctld's first start (no state yet) takes its TRES from slurmdbd and exits without it
("we have no TRES from it"): the controller pod waits for slurmdbd until its state holds
last_tres. Later starts read last_tres and run whether slurmdbd is up or not. */}}
{{- define "slonk.waitForSlurmdbd" -}}
{{- $dbd := include "slonk.slurmdbd" . -}}
- name: wait-slurmdbd
  image: {{ include "slonk.image" .Values.images.controller }}
  imagePullPolicy: {{ .Values.imagePullPolicy }}
  command:
    - python3
    - -c
    - |
      import os, socket, sys, time
      host, port, state = sys.argv[1], int(sys.argv[2]), sys.argv[3]
      while not os.path.exists(state):
          try:
              socket.create_connection((host, port), timeout=5).close()
              break
          except OSError as exc:
              print(f"first start: waiting for slurmdbd at {host}:{port} ({exc})", flush=True)
              time.sleep(2)
    - {{ include "slonk.podFQDN" (dict "root" . "pod" (printf "%s-0" $dbd) "svc" $dbd) }}
    - {{ .Values.accounting.slurmdbdPort | quote }}
    - /var/spool/slurmctld/last_tres
  volumeMounts:
    - name: state
      mountPath: /var/spool/slurmctld
      readOnly: true
{{- end -}}
