#!/usr/bin/env bash
# setup.sh installs everything Willow needs on a fresh Debian machine that
# has Go: Debian packages through apt-get and Go tools through `go install`.
# It is idempotent: a second run checks and returns quickly.
set -euo pipefail

GOBIN="$(go env GOPATH)/bin"
export PATH="$GOBIN:$PATH"

APT_PACKAGES=(
  redis-server        # Redis for the master, timeline and tests
  ffmpeg              # video transcode and SSIM measurements
  libheif-examples    # heif-enc / heif-convert / heif-info
  libheif-dev         # libheif headers (cgo decode of HEIC input)
  libjpeg62-turbo-dev # libjpeg-turbo headers (cgo JPEG decode with DCT scaling, compress/)
  pkg-config          # cgo pkg-config lookups (libheif)
  libvips-tools       # vipsthumbnail, the compress benchmark baseline
  nginx-light         # the edge-cache benchmark baseline
  protobuf-compiler   # protoc for `make proto`
  chromium            # headless browser for the flex console test (chromedp)
  jq                  # the README quick start and willow up's banner (TestUpOnRedisCluster runs it)
  curl                # the same
  ca-certificates
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Newer Debian releases ship libheif's encoders as plugins (recommended,
  # so not pulled in above); bookworm builds x265 into libheif itself.
  for plugin in libheif-plugin-x265 libheif-plugin-libde265; do
    if apt-cache show "$plugin" >/dev/null 2>&1; then
      apt-get install -y -qq --no-install-recommends "$plugin" >/dev/null
    fi
  done
  # Debian starts services on install; Willow starts its own instances.
  for svc in redis-server nginx; do
    (service "$svc" stop >/dev/null 2>&1 || true)
  done
fi

# Go tools, pinned.
declare -A GO_TOOLS=(
  [versitygw]="github.com/versity/versitygw/cmd/versitygw@v1.8.0"
  [tusd]="github.com/tus/tusd/v2/cmd/tusd@v2.9.1" # the upload benchmark's peer (make bench-upload)
  [protoc-gen-go]="google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
  [protoc-gen-go-grpc]="google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1"
  [grpcurl]="github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"
)
for bin in "${!GO_TOOLS[@]}"; do
  if [[ ! -x "$GOBIN/$bin" ]]; then
    echo "setup: go install ${GO_TOOLS[$bin]}"
    GOFLAGS= go install "${GO_TOOLS[$bin]}"
  fi
done
# Node.js and npm for the stock upload clients tested in web/ (Debian's
# nodejs, or any Node >= 18 already installed).
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "setup: installing nodejs and npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# tus-js-client, pinned by web/package-lock.json, into web/node_modules
# (npm ci: exactly the locked versions); redone only when the lock changes.
WEB="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/web"
LOCK_SUM=$(sha256sum "$WEB/package-lock.json" | cut -d' ' -f1)
if [[ "$(cat "$WEB/node_modules/.willow-lock" 2>/dev/null)" != "$LOCK_SUM" ]]; then
  echo "setup: npm ci in web/ (tus-js-client)"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$LOCK_SUM" >"$WEB/node_modules/.willow-lock"
fi
echo "setup: ok"
