#!/usr/bin/env bash
# Run the built images with `buildah run` (no container engine needed) and check they work:
#   - slonkd image: `slonkd --version`
#   - controller image: slurmctld under slonk-init (with its own munged), and the program of
#     the coordinator's strigger triggers (/opt/slonkd/bin/slonkd-nudge) runs as SlurmUser
#   - worker image: slurmd under slonk-init, plus `slonkd --version` (the preStop command)
#   - login image: sinfo until the worker's node reads idle, srun a job step on it, and
#     slonk-init --sshd answering ssh-keyscan
#   - then the chart's own files: slurm.conf, cgroup.conf, gres.conf and the munge key as
#     `helm template` renders them (one pool of one node, free ports, no GPUs), each daemon
#     under the pod's host name, the headless-Service DNS names in /etc/hosts: slurmctld and
#     `slurmd -N <pod>` must reach idle with exactly the chart's configuration
#   - mosquitto image with the chart's mosquitto.conf and its dynsec-init command verbatim:
#     anonymous clients are refused, the admin from the chart's Secret lists the clients
# Everything shares the host's network namespace (chroot isolation) on 127.0.0.1 with free
# high ports; one private directory holds the config and the munge key.
#
#   container/smoke.sh          (after container/build.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
TAG="${TAG:-dev}"
HELM="${HELM:-$HOME/.cache/slonkd/tools/helm-4.3.1/helm}"
driver="${BUILDAH_STORAGE_DRIVER:-vfs}"
b() { buildah --storage-driver "$driver" "$@"; }
log() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

dir="$(mktemp -d /tmp/slonk-smoke.XXXXXX)"
containers=(); pgids=()
cleanup() {
    for pg in "${pgids[@]}"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
    sleep 1
    for pg in "${pgids[@]}"; do kill -KILL -- "-$pg" 2>/dev/null || true; done
    for c in "${containers[@]}"; do b rm "$c" >/dev/null 2>&1 || true; done
    [[ -n "${KEEP:-}" ]] || rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ctld_port="$(free_port)"; slurmd_port="$(free_port)"
host="$(hostname -s)"
mkdir -p "$dir/etc" "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
cat >"$dir/etc/slurm.conf" <<CONF
ClusterName=smoke
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=1
SlurmdTimeout=10
MailProg=/bin/true
NodeName=w0 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=500 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# The host's network and hostname: slurmctld must find itself as SlurmctldHost.
mounts=(--network host --uts host -v "$dir/etc:/etc/slurm:ro" -v "$dir/munge:/etc/slonk/munge:ro")

new() {  # new VAR IMAGE: a working container of localhost/slonk/IMAGE, removed at exit
    local _id; _id="$(b from --pull-never "localhost/slonk/$2:$TAG")"
    containers+=("$_id"); printf -v "$1" '%s' "$_id"
}
bg() {  # bg NAME CONTAINER CMD...: run in the background in its own process group
    local name="$1" c="$2"; shift 2
    setsid buildah --storage-driver "$driver" run --isolation chroot "${mounts[@]}" "$c" -- "$@" \
        >"$dir/$name.log" 2>&1 &
    pgids+=("$!")
}

log "slonkd image: slonkd --version"
new c slonkd
b run --isolation chroot "$c" -- slonkd --version

log "controller: slurmctld on 127.0.0.1:$ctld_port"
new ctl slurm-controller
# Without a broker configured the nudge says so and exits 0 (slurmctld is never held up).
b run --isolation chroot --user 64030:64030 "$ctl" -- \
    /opt/slonkd/bin/slonkd-nudge --by=slonkd-coordinator down w0 2>&1 | grep -q "could not tell the coordinator"
bg slurmctld "$ctl" /usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key -- slurmctld -D
log "worker: slurmd -N w0 on port $slurmd_port"
new wrk slurm-worker
b run --isolation chroot "$wrk" -- slonkd --version
bg slurmd "$wrk" /usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key -- slurmd -D -N w0

log "login: sinfo until w0 is idle"
new lgn slurm-login
t0=$SECONDS
state=""
while ((SECONDS - t0 < 60)); do
    state="$(b run --isolation chroot "${mounts[@]}" "$lgn" -- \
        /usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key -- \
        sinfo -h -N -o '%N %T' 2>/dev/null || true)"
    [[ "$state" == "w0 idle" ]] && break
    sleep 1
done
if [[ "$state" != "w0 idle" ]]; then
    log "FAILED: sinfo says '${state}'"; tail -n 20 "$dir"/*.log >&2; exit 1
fi
log "OK: sinfo says '$state' after $((SECONDS - t0)) s"

log "login: srun a job step on w0 (slurmstepd in the worker container)"
out="$(b run --isolation chroot "${mounts[@]}" "$lgn" -- \
    /usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key -- \
    srun -N1 -w w0 -t 1 sh -c 'echo job-ran-as-$(id -un)')"
[[ "$out" == "job-ran-as-root" ]] || { log "FAILED: srun said '$out'"; exit 1; }
log "OK: srun says '$out'"

ssh_port="$(free_port)"
log "login: slonk-init --sshd on 127.0.0.1:$ssh_port"
setsid buildah --storage-driver "$driver" run --isolation chroot "${mounts[@]}" \
    --env "SLONK_INIT_SSHD_ARGS=-p $ssh_port -o ListenAddress=127.0.0.1" "$lgn" -- \
    /usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key --sshd \
    >"$dir/sshd.log" 2>&1 &
pgids+=("$!")
keys=""
for _ in $(seq 1 60); do
    keys="$(ssh-keyscan -T 2 -p "$ssh_port" 127.0.0.1 2>/dev/null || true)"
    [[ -n "$keys" ]] && break
    sleep 0.5
done
[[ "$keys" == *ssh-ed25519* ]] || { log "FAILED: no host key from sshd"; tail -n 20 "$dir/sshd.log" >&2; exit 1; }
log "OK: sshd serves host keys ($(grep -c . <<<"$keys") key types)"

[[ -x "$HELM" ]] || { log "no helm at $HELM (python -m slonkd_sandbox.toolchain builds it): chart phase not run"; exit 1; }
log "chart: helm template the SLURM config and munge key of release 'sm' in namespace 'smoke'"
chart="$dir/chart"; mkdir -p "$chart/etc" "$chart/munge"
ctld_port="$(free_port)"; slurmd_port="$(free_port)"
"$HELM" template sm "$repo/deploy/helm/slonk" --namespace smoke \
    --show-only templates/slurm-config.yaml --show-only templates/secrets.yaml \
    --set "slurm.slurmctldPort=$ctld_port" --set "slurm.slurmdPort=$slurmd_port" \
    --set-json "pools=[{\"name\":\"gpu\",\"replicas\":1,\"gpus\":0,\"cpus\":$(nproc),\"realMemoryMB\":500}]" \
    --set-json 'slurm.config={"ProctrackType":"proctrack/linuxproc","TaskPlugin":"task/none","SlurmdTimeout":10}' \
    >"$chart/rendered.yaml"
# Pull the files out of the rendered objects (block scalars and base64 data; no YAML library).
python3 - "$chart" <<'PY'
import base64, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
docs = (out / "rendered.yaml").read_text().split("\n---\n")
for doc in docs:
    if "kind: ConfigMap" in doc:
        for name, body in re.findall(r"^  ([\w.]+\.conf): \|\n((?:    .*\n|\n)*)", doc + "\n", re.M):
            text = "".join(line[4:] + "\n" for line in body.rstrip("\n").split("\n"))
            (out / "etc" / name).write_text(text)
    if "name: sm-munge" in doc:
        key = re.search(r"^  munge\.key: (\S+)", doc, re.M).group(1)
        path = out / "munge" / "munge.key"
        path.write_bytes(base64.b64decode(key))
        path.chmod(0o400)
PY
for f in slurm.conf cgroup.conf gres.conf topology.conf; do [[ -f "$chart/etc/$f" ]] || { log "FAILED: no $f rendered"; exit 1; }; done
[[ "$(stat -c %s "$chart/munge/munge.key")" -ge 1024 ]] || { log "FAILED: munge key too short"; exit 1; }
ctld_fqdn="sm-slurmctld-0.sm-slurmctld.smoke.svc.cluster.local"
node_fqdn="sm-gpu-0.sm-slurmd.smoke.svc.cluster.local"
grep -q "^SlurmctldHost=sm-slurmctld-0($ctld_fqdn)$" "$chart/etc/slurm.conf"
grep -q "^NodeName=sm-gpu-0 NodeAddr=$node_fqdn " "$chart/etc/slurm.conf"
# What the cluster DNS would answer for the headless Services, on loopback.
printf '127.0.0.1 localhost\n127.0.0.1 %s sm-slurmctld-0\n127.0.0.1 %s sm-gpu-0\n' \
    "$ctld_fqdn" "$node_fqdn" >"$chart/hosts"
mounts=(--network host --no-hosts -v "$chart/etc:/etc/slurm:ro" -v "$chart/munge:/etc/slonk/munge:ro"
    -v "$chart/hosts:/etc/hosts:ro")
init=(/usr/local/sbin/slonk-init --munge-key /etc/slonk/munge/munge.key --)
new ctl slurm-controller
log "chart: slurmctld as pod sm-slurmctld-0 (port $ctld_port)"
setsid buildah --storage-driver "$driver" run --isolation chroot "${mounts[@]}" \
    --uts private --hostname sm-slurmctld-0 "$ctl" -- "${init[@]}" slurmctld -D \
    >"$dir/chart-slurmctld.log" 2>&1 &
pgids+=("$!")
new wrk slurm-worker
log "chart: slurmd -N sm-gpu-0 as pod sm-gpu-0 (port $slurmd_port)"
setsid buildah --storage-driver "$driver" run --isolation chroot "${mounts[@]}" \
    --uts private --hostname sm-gpu-0 "$wrk" -- "${init[@]}" slurmd -D -N sm-gpu-0 \
    >"$dir/chart-slurmd.log" 2>&1 &
pgids+=("$!")
new lgn slurm-login
t0=$SECONDS; state=""
while ((SECONDS - t0 < 60)); do
    state="$(b run --isolation chroot "${mounts[@]}" --uts private --hostname sm-login-0 "$lgn" -- \
        "${init[@]}" sinfo -h -N -o '%N %P %T' 2>/dev/null || true)"
    [[ "$state" == "sm-gpu-0 gpu* idle" ]] && break
    sleep 1
done
if [[ "$state" != "sm-gpu-0 gpu* idle" ]]; then
    log "FAILED: sinfo says '${state}'"; tail -n 20 "$dir"/chart-*.log >&2; exit 1
fi
log "OK: with the chart's slurm.conf, sinfo says '$state' after $((SECONDS - t0)) s"

log "chart: mosquitto with the chart's mosquitto.conf and dynsec-init command (uid 1883)"
mq="$dir/mq"; mkdir -p "$mq/config" "$mq/data"; chown 1883:1883 "$mq/data"
mq_port="$(free_port)"
"$HELM" template sm "$repo/deploy/helm/slonk" --namespace smoke \
    --show-only templates/mosquitto.yaml --show-only templates/secrets.yaml \
    --set "mosquitto.port=$mq_port" >"$mq/rendered.yaml"
python3 - "$mq" <<'PY'
import base64, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
text = (out / "rendered.yaml").read_text()
conf = re.search(r"^  mosquitto\.conf: \|\n((?:    .*\n|\n)*)", text, re.M).group(1)
(out / "config" / "mosquitto.conf").write_text("".join(l[4:] + "\n" for l in conf.rstrip("\n").split("\n")))
init = re.search(r"^          command:\n            - (/bin/sh)\n            - (-c)\n            - (.*)\n", text, re.M)
(out / "init.cmd").write_text(init.group(3))
secret = text[text.index("name: sm-mosquitto-admin"):]
for key in ("username", "password"):
    value = re.search(rf"^  {key}: (\S+)", secret, re.M).group(1)
    (out / key).write_text(base64.b64decode(value).decode())
PY
admin="$(cat "$mq/username")"; password="$(cat "$mq/password")"
new mqc mosquitto
mq_mounts=(--network host --user 1883:1883 -v "$mq/config:/mosquitto/config:ro" -v "$mq/data:/mosquitto/data")
b run --isolation chroot "${mq_mounts[@]}" --env "ADMIN_USERNAME=$admin" --env "ADMIN_PASSWORD=$password" \
    "$mqc" -- /bin/sh -c "$(cat "$mq/init.cmd")"
[[ -s "$mq/data/dynamic-security.json" ]] || { log "FAILED: dynsec-init wrote nothing"; exit 1; }
setsid buildah --storage-driver "$driver" run --isolation chroot "${mq_mounts[@]}" "$mqc" -- \
    mosquitto -c /mosquitto/config/mosquitto.conf >"$dir/mosquitto.log" 2>&1 &
pgids+=("$!")
reply=""
for _ in $(seq 1 40); do
    reply="$(mosquitto_rr -h 127.0.0.1 -p "$mq_port" -u "$admin" -P "$password" -W 3 \
        -t '$CONTROL/dynamic-security/v1' -e '$CONTROL/dynamic-security/v1/response' \
        -m '{"commands":[{"command":"listClients"}]}' 2>/dev/null || true)"
    [[ -n "$reply" ]] && break
    sleep 0.5
done
[[ "$reply" == *"\"$admin\""* ]] || { log "FAILED: admin got '$reply'"; tail -n 20 "$dir/mosquitto.log" >&2; exit 1; }
if mosquitto_pub -h 127.0.0.1 -p "$mq_port" -t slonk/v1/x -m hi -q 1 2>/dev/null; then
    log "FAILED: an anonymous client could publish"; exit 1
fi
log "OK: dynsec admin lists clients ($reply), anonymous publish refused"
