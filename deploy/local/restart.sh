#!/usr/bin/env bash
# deploy/local/restart.sh DIR NAME: start process NAME (as listed in
# DIR/run, e.g. upload-a-1, master-2, redis, s3) again with the command
# line up.sh gave it, after it died or was killed, and refresh
# DIR/cluster.json. It refuses while NAME is still running.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 DIR NAME" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(cd "$1" && pwd)
NAME=$2
source "$HERE/lib.sh"
[[ -f $DIR/run/$NAME.cmd ]] || die "no process $NAME in $DIR/run"
if [[ -f $DIR/run/$NAME.pid ]] && alive "$(cat "$DIR/run/$NAME.pid")"; then
	die "$NAME is still running (pid $(cat "$DIR/run/$NAME.pid"))"
fi
echo "--- restart $(date -u +%FT%TZ)" >>"$DIR/logs/$NAME.log"
launch "$NAME"
write_cluster_json
cat "$DIR/run/$NAME.pid"
