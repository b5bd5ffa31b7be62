# Shared by up.sh, down.sh and restart.sh (sourced, not run).
#
# Layout of a deploy/local cluster in DIR:
#   DIR/bin/        the binaries (go build -o DIR/bin ./cmd/...)
#   DIR/logs/N.log  one log per process N
#   DIR/run/N.pid   its pid; DIR/run/N.cmd its command line (restart.sh)
#   DIR/run/N.meta  "role region addr" of the process (cluster.json nodes)
#   DIR/run/url-key "ID SECRET" of the download URL key; edgecache.yaml
#   DIR/data/       redis, S3 (versitygw posix), staging and buffer pools
#   DIR/cluster.json

set -euo pipefail

# The base port: every process listens on its own loopback IP, gRPC on
# BASE, admin HTTP on BASE+1, edge HTTP or console on BASE+2.
BASE=${WILLOW_LOCAL_PORT:-27000}
REDIS_IP=127.0.0.20
S3_IP=127.0.0.21
REDIS_PORT=$((BASE + 79))
S3_PORT=$((BASE + 90))
MASTER_IPS=(127.0.0.11 127.0.0.12)
TIMELINE_IP=127.0.0.30
S3_ACCESS=willowlocal
S3_SECRET=willowlocalsecret
# The S3 secret reaches the Willow processes (started by up.sh or
# restart.sh) through the environment, never their command lines.
export WILLOW_S3_SECRET_KEY=$S3_SECRET
S3_BUCKET=willow
ONCALL_TOKEN=${WILLOW_LOCAL_ONCALL_TOKEN:-local-oncall}
UPLOAD_SECRET=${WILLOW_LOCAL_UPLOAD_SECRET:-local-upload-secret}
# Credentials (docs/security.md). up.sh generates the cluster secret every
# node presents (DIR/run/cluster-secret) and the operators file with the
# developer's identity (role admin, ONCALL_TOKEN's hash); they and the
# upload secret reach the processes through the environment, never their
# command lines. restart.sh finds them here again.
export WILLOW_UPLOAD_SECRET=$UPLOAD_SECRET
export WILLOW_OPERATORS=$DIR/run/operators.yaml
if [[ -f $DIR/run/cluster-secret ]]; then
	WILLOW_CLUSTER_SECRET=$(cat "$DIR/run/cluster-secret")
	export WILLOW_CLUSTER_SECRET
fi

# make_credentials: the cluster secret (WILLOW_LOCAL_CLUSTER_SECRET pins
# it) and the operators file, under DIR/run.
make_credentials() {
	local secret=${WILLOW_LOCAL_CLUSTER_SECRET:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
	(
		umask 077
		echo "$secret" >"$DIR/run/cluster-secret"
		printf '# name: {sha256, roles} (package auth); the developer token is cluster.json oncall_token\ndeveloper: {sha256: %s, roles: [admin]}\n' \
			"$(printf %s "$ONCALL_TOKEN" | sha256sum | cut -d' ' -f1)" >"$DIR/run/operators.yaml"
	)
	WILLOW_CLUSTER_SECRET=$secret
	export WILLOW_CLUSTER_SECRET
}

die() { echo "deploy/local: $*" >&2; exit 1; }

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}

# ours PID CMDFILE: PID runs the program named in CMDFILE.
ours() {
	local prog
	prog=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -1) || return 1
	prog=${prog%% *} # redis-server rewrites its title to "redis-server ADDR"
	[[ -n $prog ]] && grep -q -- "$(basename "$prog")" "$2"
}

# wait_tcp HOST PORT SECONDS
wait_tcp() {
	local deadline=$((SECONDS + $3))
	while ((SECONDS < deadline)); do
		if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# launch NAME: starts DIR/run/NAME.cmd in its own session, detached,
# appending to DIR/logs/NAME.log, and records the pid.
launch() {
	local name=$1
	setsid bash "$DIR/run/$name.cmd" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$DIR/run/$name.pid"
}

# start NAME ROLE REGION ADDR CMD...: records the command line and meta,
# then launches it.
start() {
	local name=$1 role=$2 region=$3 addr=$4
	shift 4
	{
		printf 'exec'
		printf ' %q' "$@"
		printf '\n'
	} >"$DIR/run/$name.cmd"
	echo "$role $region $addr" >"$DIR/run/$name.meta"
	launch "$name"
}

# write_cluster_json: DIR/cluster.json from the meta and pid files.
write_cluster_json() {
	local masters console nodes="" first=1 f name role region addr admin pid url_id url_secret
	read -r url_id url_secret <"$DIR/run/url-key"
	masters=$(printf '%s:'"$BASE"',' "${MASTER_IPS[@]}")
	masters=${masters%,}
	console="${MASTER_IPS[0]}:$((BASE + 2))"
	for f in "$DIR"/run/*.meta; do
		name=$(basename "$f" .meta)
		read -r role region addr <"$f"
		pid=$(cat "$DIR/run/$name.pid" 2>/dev/null || echo 0)
		[[ $region == - ]] && region=""
		# Every Willow process serves its admin HTTP (/metrics, /healthz)
		# on BASE+1 of its gRPC IP; redis and s3 have none.
		admin=""
		[[ $role == redis || $role == s3 ]] || admin="${addr%:*}:$((BASE + 1))"
		((first)) || nodes+=","
		first=0
		nodes+=$(printf '\n    {"id": "%s", "role": "%s", "region": "%s", "addr": "%s", "admin": "%s", "pid": %d}' "$name" "$role" "$region" "$addr" "$admin" "$pid")
	done
	region_json() { # REGION SUBNET
		printf '"%s": {"upload": "127.0.%s.1:%d", "upload_http": "http://127.0.%s.1:%d/files/", "compress": "127.0.%s.11:%d", "edgecache_grpc": "127.0.%s.21:%d", "edgecache_http": "127.0.%s.21:%d"}' \
			"$1" "$2" "$BASE" "$2" $((BASE + 2)) "$2" "$BASE" "$2" "$BASE" "$2" $((BASE + 2))
	}
	cat >"$DIR/cluster.json.tmp" <<EOF
{
  "master": "$masters",
  "console": "$console",
  "redis": "redis://$REDIS_IP:$REDIS_PORT",
  "timeline": "$TIMELINE_IP:$BASE",
  "oncall_token": "$ONCALL_TOKEN",
  "upload_secret": "$UPLOAD_SECRET",
  "cluster_secret": "$WILLOW_CLUSTER_SECRET",
  "operators": "$DIR/run/operators.yaml",
  "url_keys": [{"id": "$url_id", "secret": "$url_secret"}],
  "regions": {
    $(region_json a 1),
    $(region_json b 2)
  },
  "nodes": [$nodes
  ]
}
EOF
	chmod 600 "$DIR/cluster.json.tmp"
	mv "$DIR/cluster.json.tmp" "$DIR/cluster.json"
}
