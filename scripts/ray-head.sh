#!/usr/bin/env bash
# A Ray head for splatdrive jobs on this machine: everything bound to 127.0.0.1 (the dashboard and
# its job API run code for whoever reaches them), token authentication on, stopped by its PID.
#
#   scripts/ray-head.sh start     # prints the job address; the PID and log go to $SPLATDRIVE_RAY_DIR
#   scripts/ray-head.sh status
#   scripts/ray-head.sh stop
#
#   RAY_AUTH_MODE=token .venv/bin/ray job submit --address http://127.0.0.1:8265 --working-dir . -- \
#       python -m learner.train --store s3://bucket/runs --run r1
#
# Token: $RAY_AUTH_TOKEN, else the file $RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token (made here if
# missing, with `ray get-auth-token --generate`). Every client needs RAY_AUTH_MODE=token and the same
# token. To reach the head from another machine, forward the port over SSH
# (ssh -L 8265:127.0.0.1:8265 host); do not bind it to 0.0.0.0.
#
# Settings (environment): SPLATDRIVE_RAY_DIR (PID file and log; default .cache/ray-head),
# RAY_HEAD_TEMP (Ray's session folder; keep it short, Ray's socket paths are limited; default
# /tmp/sd-ray-<uid>), RAY_HEAD_PORT (GCS, 6379), RAY_DASHBOARD_PORT (8265), RAY_CLIENT_PORT (10001),
# RAY_DASHBOARD_AGENT_PORT and RAY_METRICS_EXPORT_PORT (Ray's defaults unless set: a second head on
# one machine needs its own), RAY_HEAD_NUM_CPUS (all), RAY_HEAD_START_TIMEOUT (seconds, 120).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
ray_bin="${RAY_BIN:-$repo/.venv/bin/ray}"
[ -x "$ray_bin" ] || ray_bin="$(command -v ray)"
state="${SPLATDRIVE_RAY_DIR:-$repo/.cache/ray-head}"
pid_file="$state/head.pid"
log="$state/head.log"
temp="${RAY_HEAD_TEMP:-/tmp/sd-ray-$(id -u)}"
gcs_port="${RAY_HEAD_PORT:-6379}"
dash_port="${RAY_DASHBOARD_PORT:-8265}"
client_port="${RAY_CLIENT_PORT:-10001}"
export RAY_AUTH_MODE=token

running() { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }

start() {
    if running; then
        echo "ray-head: already running (pid $(cat "$pid_file")); job address http://127.0.0.1:$dash_port"
        return 0
    fi
    mkdir -p "$state"
    if [ -z "${RAY_AUTH_TOKEN:-}" ] && [ -z "${RAY_AUTH_TOKEN_PATH:-}" ]; then
        "$ray_bin" get-auth-token --generate >/dev/null  # ~/.ray/auth_token, if there is none yet
    fi
    local extra=()
    [ -n "${RAY_HEAD_NUM_CPUS:-}" ] && extra=(--num-cpus "$RAY_HEAD_NUM_CPUS")
    [ -n "${RAY_DASHBOARD_AGENT_PORT:-}" ] && extra+=(--dashboard-agent-listen-port "$RAY_DASHBOARD_AGENT_PORT")
    [ -n "${RAY_METRICS_EXPORT_PORT:-}" ] && extra+=(--metrics-export-port "$RAY_METRICS_EXPORT_PORT")
    # --block: this process owns the head; SIGTERM to it stops everything it started.
    setsid "$ray_bin" start --head --block --disable-usage-stats \
        --node-ip-address 127.0.0.1 --port "$gcs_port" --temp-dir "$temp" \
        --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$dash_port" \
        --ray-client-server-port "$client_port" "${extra[@]}" >"$log" 2>&1 </dev/null &
    echo $! >"$pid_file"
    local deadline=$((SECONDS + ${RAY_HEAD_START_TIMEOUT:-120}))
    until "$ray_bin" job list --address "http://127.0.0.1:$dash_port" >/dev/null 2>&1; do
        if ! running; then
            echo "ray-head: the head exited; its log ($log):" >&2
            tail -n 30 "$log" >&2
            rm -f "$pid_file"
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "ray-head: no job API on 127.0.0.1:$dash_port yet; stopping it (log: $log)" >&2
            stop >&2
            return 1
        fi
        sleep 1
    done
    echo "ray-head: running (pid $(cat "$pid_file")), dashboard and job API on http://127.0.0.1:$dash_port, token auth on"
    echo "ray-head: submit with RAY_AUTH_MODE=token $ray_bin job submit --address http://127.0.0.1:$dash_port ..."
}

stop() {
    if ! [ -f "$pid_file" ]; then
        echo "ray-head: not running (no $pid_file)"
        return 0
    fi
    local pid
    pid="$(cat "$pid_file")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"  # its process group (setsid)
        fi
    fi
    rm -f "$pid_file"
    echo "ray-head: stopped (pid $pid)"
}

status() {
    if running; then
        echo "ray-head: running (pid $(cat "$pid_file")), job address http://127.0.0.1:$dash_port"
    else
        echo "ray-head: not running"
        return 3
    fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
