#!/usr/bin/env bash
# deploy/local/up.sh DIR: build Willow and start a two-region cluster as
# separate processes on loopback, with a real redis-server and versitygw:
#
#   masters    127.0.0.11, 127.0.0.12 (HA, sharing Redis; console on the first)
#   redis      127.0.0.20   versitygw (S3) 127.0.0.21
#   timeline   127.0.0.30
#   region a   upload 127.0.1.1-2, compress 127.0.1.11-12, edgecache 127.0.1.21-22
#   region b   the same on 127.0.2.x
#
# Every process listens on its own IP: gRPC on $WILLOW_LOCAL_PORT (default
# 27000), admin HTTP on +1, edge HTTP, the upload fronts' tus / IETF
# endpoint (/files/) and the console on +2; Redis on +79,
# S3 on +90. It writes DIR/cluster.json, logs to DIR/logs, pids to DIR/run,
# and returns once `willow nodes` shows every node healthy. Stop it with
# deploy/local/down.sh DIR; restart one process with restart.sh DIR NAME.
#
# Upload fronts wait at most 2 s (WILLOW_LOCAL_COMMIT_WAIT) in Commit for the
# first compress attempt: on a 2-core box HEIC compression runs several
# seconds a photo, and waiting the default 30 s would make commits as slow as
# the compress backlog (the acknowledgement never depends on it).
#
# Environment: WILLOW_LOCAL_PORT, WILLOW_LOCAL_NOBUILD=1 (reuse DIR/bin),
# WILLOW_LOCAL_COMMIT_WAIT, WILLOW_LOCAL_WAIT (seconds to wait for health,
# default 60), WILLOW_LOCAL_UPLOAD_CONFIG (a config file every upload front
# reads with -config, e.g. the soak's short staging_ttl),
# WILLOW_LOCAL_EDGE_DISK_BYTES and WILLOW_LOCAL_EDGE_MEM_BYTES (each edge's
# disk and memory tiers, default 256 and 64 MiB). It runs plaintext: the
# willow CLI it waits with dials without TLS.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
source "$HERE/lib.sh"

for f in "$DIR"/run/*.pid; do
	[[ -e $f ]] || continue
	if alive "$(cat "$f")"; then
		die "a cluster is already running in $DIR ($(basename "$f" .pid)); run down.sh first"
	fi
done
command -v redis-server >/dev/null || die "redis-server not found (scripts/setup.sh)"
VERSITYGW=$(command -v versitygw || echo "$(go env GOPATH)/bin/versitygw")
[[ -x $VERSITYGW ]] || die "versitygw not found (scripts/setup.sh)"

mkdir -p "$DIR/bin" "$DIR/logs" "$DIR/run" "$DIR/data"
rm -f "$DIR"/run/*
if [[ ${WILLOW_LOCAL_NOBUILD:-} != 1 ]]; then
	echo "deploy/local: building into $DIR/bin" >&2
	(cd "$HERE/../.." && go build -o "$DIR/bin/" ./cmd/...)
fi
BIN=$DIR/bin


# Infrastructure.
mkdir -p "$DIR/data/redis" "$DIR/data/s3"
start redis redis - "$REDIS_IP:$REDIS_PORT" redis-server --port "$REDIS_PORT" --bind "$REDIS_IP" \
	--dir "$DIR/data/redis" --appendonly yes --appendfsync everysec --save "" --protected-mode no
start s3 s3 - "$S3_IP:$S3_PORT" env ROOT_ACCESS_KEY=$S3_ACCESS ROOT_SECRET_KEY=$S3_SECRET \
	"$VERSITYGW" --port "$S3_IP:$S3_PORT" posix "$DIR/data/s3"
wait_tcp "$REDIS_IP" "$REDIS_PORT" 20 || die "redis did not start (see $DIR/logs/redis.log)"
wait_tcp "$S3_IP" "$S3_PORT" 30 || die "versitygw did not start (see $DIR/logs/s3.log)"

REDIS_URL=redis://$REDIS_IP:$REDIS_PORT
S3=(-s3-endpoint "$S3_IP:$S3_PORT" -s3-bucket "$S3_BUCKET" -s3-access-key "$S3_ACCESS")
MASTERS=$(printf '%s:'"$BASE"',' "${MASTER_IPS[@]}")
MASTERS=${MASTERS%,}

make_credentials

upload_config=()
if [[ -n ${WILLOW_LOCAL_UPLOAD_CONFIG:-} ]]; then
	[[ -f $WILLOW_LOCAL_UPLOAD_CONFIG ]] || die "WILLOW_LOCAL_UPLOAD_CONFIG: no file $WILLOW_LOCAL_UPLOAD_CONFIG"
	cp "$WILLOW_LOCAL_UPLOAD_CONFIG" "$DIR/run/upload.yaml"
	upload_config=(-config "$DIR/run/upload.yaml")
fi

# The download URL key (signs and verifies URLs; cluster.json carries it
# for the CLI). WILLOW_LOCAL_URL_KEY pins the secret.
URL_KEY_ID=local-1
URL_KEY_SECRET=${WILLOW_LOCAL_URL_KEY:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
(
	umask 077
	echo "$URL_KEY_ID $URL_KEY_SECRET" >"$DIR/run/url-key"
	cat >"$DIR/run/edgecache.yaml" <<YAML
edgecache:
  disk_capacity_bytes: ${WILLOW_LOCAL_EDGE_DISK_BYTES:-$((256 << 20))}
  url_keys:
    - {id: $URL_KEY_ID, secret: "$URL_KEY_SECRET"}
YAML
	cat >"$DIR/run/timeline.yaml" <<YAML
timeline:
  url_keys:
    - {id: $URL_KEY_ID, secret: "$URL_KEY_SECRET"}
YAML
)

# Masters: a quicker dead-node judgement than the defaults (2 s without a
# heartbeat, probes every 500 ms) so a killed process leaves within 3 s.
cat >"$DIR/run/master.yaml" <<YAML
master:
  missed_after: 2s
  probe_interval: 500ms
YAML
i=0
for ip in "${MASTER_IPS[@]}"; do
	i=$((i + 1))
	console=()
	((i == 1)) && console=(-console "$ip:$((BASE + 2))")
	start "master-$i" master - "$ip:$BASE" "$BIN/master" -config "$DIR/run/master.yaml" -id "master-$i" \
		-grpc "$ip:$BASE" -admin "$ip:$((BASE + 1))" "${console[@]}" -redis "$REDIS_URL"
done
for ip in "${MASTER_IPS[@]}"; do
	wait_tcp "$ip" "$BASE" 20 || die "master on $ip did not start (see $DIR/logs)"
done

start timeline-1 timeline a "$TIMELINE_IP:$BASE" "$BIN/timeline" -config "$DIR/run/timeline.yaml" -id timeline-1 -region a \
	-grpc "$TIMELINE_IP:$BASE" -admin "$TIMELINE_IP:$((BASE + 1))" -master "$MASTERS" -redis "$REDIS_URL"

for r in a b; do
	net=1
	[[ $r == b ]] && net=2
	for k in 1 2; do
		ip=127.0.$net.$((10 + k))
		start "compress-$r-$k" compress "$r" "$ip:$BASE" "$BIN/compress" -id "compress-$r-$k" -region "$r" \
			-grpc "$ip:$BASE" -admin "$ip:$((BASE + 1))" -master "$MASTERS" -workers 1 "${S3[@]}"
		ip=127.0.$net.$k
		mkdir -p "$DIR/data/upload-$r-$k"
		start "upload-$r-$k" upload "$r" "$ip:$BASE" "$BIN/upload" "${upload_config[@]}" -id "upload-$r-$k" -region "$r" \
			-grpc "$ip:$BASE" -admin "$ip:$((BASE + 1))" -master "$MASTERS" -redis "$REDIS_URL" \
			-http "$ip:$((BASE + 2))" -cors-origins "http://${MASTER_IPS[0]}:$((BASE + 2))" \
			-commit-wait "${WILLOW_LOCAL_COMMIT_WAIT:-2s}" -secret "$UPLOAD_SECRET" -staging "$DIR/data/upload-$r-$k/staging" -pool-dir "$DIR/data/upload-$r-$k/pools" \
			"${S3[@]}"
		ip=127.0.$net.$((20 + k))
		mkdir -p "$DIR/data/edgecache-$r-$k"
		start "edgecache-$r-$k" edgecache "$r" "$ip:$BASE" "$BIN/edgecache" -config "$DIR/run/edgecache.yaml" -id "edgecache-$r-$k" -region "$r" \
			-grpc "$ip:$BASE" -admin "$ip:$((BASE + 1))" -http "$ip:$((BASE + 2))" -master "$MASTERS" \
			-capacity ${WILLOW_LOCAL_EDGE_MEM_BYTES:-$((64 << 20))} -disk-dir "$DIR/data/edgecache-$r-$k" "${S3[@]}"
	done
done
write_cluster_json

# Wait until the master lists every node healthy.
want=$(ls "$DIR"/run/*.meta | grep -cv -e /master- -e /redis. -e /s3.)
deadline=$((SECONDS + ${WILLOW_LOCAL_WAIT:-60}))
while :; do
	for f in "$DIR"/run/*.pid; do
		alive "$(cat "$f")" || die "$(basename "$f" .pid) exited during start-up; see $DIR/logs/$(basename "$f" .pid).log"
	done
	healthy=$("$BIN/willow" nodes --cluster "$DIR/cluster.json" --json 2>/dev/null | grep '"state":"healthy"' | grep -vc '"role":"master"' || true)
	if ((healthy >= want)); then
		break
	fi
	((SECONDS < deadline)) || die "only $healthy of $want nodes healthy after ${WILLOW_LOCAL_WAIT:-60}s (willow nodes --cluster $DIR/cluster.json)"
	sleep 0.5
done
echo "deploy/local: $want nodes healthy; cluster file $DIR/cluster.json, console http://${MASTER_IPS[0]}:$((BASE + 2))" >&2
