#!/usr/bin/env bash
# Stop the cluster started by start_cluster.sh STATE_DIR: cancel its jobs, shut down
# slurmctld/slurmd, stop munged. The folder is kept (remove it yourself if you like).
set -uo pipefail
STATE_DIR=${1:?usage: stop_cluster.sh STATE_DIR}
STATE_DIR=$(cd "$STATE_DIR" && pwd)
export SLURM_CONF="$STATE_DIR/slurm.conf"
log() { echo "[stop_cluster] $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$STATE_DIR/slurmctld.pid"; then
    ids=$(squeue -h -o %A 2>/dev/null | sort -u)
    if [ -n "$ids" ]; then
        log "cancelling jobs: $(echo $ids)"
        # shellcheck disable=SC2086
        scancel $ids 2>/dev/null || true
        for _ in $(seq 1 30); do
            [ -z "$(squeue -h -t PD,R,CG,S,CF,RQ -o %A 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    scontrol shutdown >/dev/null 2>&1 || true
fi
stop_pid() {  # wait up to $2 quarter-seconds for the pid in file $1 to exit, then kill it
    alive "$1" || return 0
    local pid; pid=$(cat "$1")
    for _ in $(seq 1 "$2"); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
    kill "$pid" 2>/dev/null; sleep 0.5
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    return 0
}
stop_pid "$STATE_DIR/slurmd.pid" 20
stop_pid "$STATE_DIR/slurmctld.pid" 20
stop_pid "$STATE_DIR/munge/munged.pid" 0
log "stopped (state kept in $STATE_DIR)"
