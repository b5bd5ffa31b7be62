#!/bin/sh
# deploy/docker/build.sh OUT: compile every Willow binary into OUT with the
# flags the image ships. The Dockerfile's build stage runs exactly this, and
# so does deploy's TestImageBuildScript on the host (then checking with ldd
# that each shared library the binaries link comes from a package the
# Dockerfile's runtime stage installs). cgo is on: compress links libheif
# and libjpeg-turbo (their -dev packages and pkg-config must be installed).
# Run it from anywhere; it builds the checkout it lives in.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
CGO_ENABLED=1 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$OUT/" \
	./cmd/master ./cmd/upload ./cmd/compress ./cmd/edgecache ./cmd/timeline ./cmd/willow
