#!/usr/bin/env bash
# deploy/local/down.sh DIR: stop the processes up.sh started in DIR, by
# their pid files only: SIGTERM, then SIGKILL after 10 s. Data stays in
# DIR/data (delete DIR to start afresh).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(cd "$1" && pwd)
source "$HERE/lib.sh"

pids=()
for f in "$DIR"/run/*.pid; do
	[[ -e $f ]] || continue
	pid=$(cat "$f")
	# Only the process we started: its program is the one in NAME.cmd
	# (guards against a recycled pid).
	if alive "$pid" && ours "$pid" "${f%.pid}.cmd"; then
		pids+=("$pid")
		kill -TERM "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
done
deadline=$((SECONDS + 10))
for pid in "${pids[@]}"; do
	while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
	if alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
done
echo "deploy/local: stopped ${#pids[@]} processes" >&2
