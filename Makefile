# Willow. `make run` brings up the one-box cluster; `make test` runs every test.
SHELL := /bin/bash
GOBIN := $(shell go env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)
RUN_DIR ?= ./run

.PHONY: setup build run test test-short test-faults soak bench bench-upload bench-compress bench-timeline bench-fleet bench-ring bench-edge bench-interceptor proto vet fmt fuzz

setup:
	@bash scripts/setup.sh

# The version and revision willow_build_info and `willow version` report
# (go build stamps the revision by itself unless -buildvcs=false).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)

build: setup
	go build -ldflags "-X willow/buildinfo.version=$(VERSION) -X willow/buildinfo.revision=$(REVISION)" -o bin/ ./cmd/...

run: build
	./bin/willow up --dir $(RUN_DIR)

vet:
	go vet ./...

test: setup vet
	go test -count=1 -timeout 40m ./...

# The fault suite (faults/, about five minutes): a deploy/local two-region
# cluster under load, kill -9 of each role in turn. `make test` skips it.
test-faults: setup
	WILLOW_FAULTS=1 go test -count=1 -v -timeout 30m ./faults/

# The soak (faults/soak_test.go, about 10 minutes plus settling): a
# deploy/local cluster under mixed load with pools forced on and off and
# drained, abandoned uploads, poison photos, a front and an edge kill -9'd;
# then disk use, RSS/goroutine trends and lost uploads are checked.
# SOAK_DURATION sets the load time. `make test` skips it.
SOAK_DURATION ?= 10m
soak: setup
	WILLOW_SOAK=1 WILLOW_SOAK_DURATION=$(SOAK_DURATION) go test -count=1 -v -run '^TestSoak$$' -timeout 60m ./faults/

test-short:
	go test -short -count=1 ./...

bench: setup
	go test -run '^$$' -bench . -benchtime 1x ./... 

# Upload front (BENCHMARKS.md): the gRPC front against a bare client stream
# on tmpfs, subjects alternating per round; then one stock tus client
# (tus-js-client) against tusd and Willow's tus endpoint, on disk and on
# tmpfs, 1/5/50 MiB, 1 and 16 clients (WILLOW_BENCH_ROUNDS rounds, medians).
bench-upload: setup
	WILLOW_BENCH_DIR=/dev/shm go test -run '^$$' -bench 'BenchmarkUpload$$' -benchtime 20x -timeout 10m ./upload
	WILLOW_BENCH_ROUNDS=3 go test -run '^$$' -bench BenchmarkTusVsTusd -benchtime 1x -timeout 20m ./upload
	WILLOW_BENCH_DIR=/dev/shm WILLOW_BENCH_ROUNDS=3 go test -run '^$$' -bench BenchmarkTusVsTusd -benchtime 1x -timeout 20m ./upload

bench-compress: setup
	go test -run '^$$' -bench . -benchtime 1x -timeout 120m ./compress/...

# Timeline fan-out against the social graph (BENCHMARKS.md): F = 10..5000
# followers, delay ratio 0 and 0.5, one redis-server and a 3-master Redis
# Cluster; then a 5000-follower backlog released at the cap.
bench-timeline: setup
	go test -run '^$$' -bench BenchmarkTimelineFanout -benchtime 20x -timeout 10m ./timeline
	go test -run '^$$' -bench BenchmarkTimelineRelease -benchtime 1x -timeout 10m ./timeline
	go test -run '^$$' -bench BenchmarkTimelineRetry -benchtime 5x -timeout 10m ./timeline

# The master against a simulated fleet (BENCHMARKS.md): one master (a child
# process) on redis-server, N = 100, 1000, 5000 nodes that register,
# heartbeat at 1 Hz and hold a Watch stream; one iteration is a flex change.
bench-fleet: setup
	go test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 20m ./master

# Edge ring churn (BENCHMARKS.md): 3, 10, 50 edges, one added or removed,
# keys moved and the hit-ratio dip on a replayed Zipf trace.
bench-ring: setup
	go test -run '^$$' -bench BenchmarkRingChurn -benchtime 1x -timeout 20m ./edgecache/ring

# Edge cache against nginx (BENCHMARKS.md): cached hits of 100 KiB and 1 MiB
# objects, the two servers alternating in 250 ms slices over persistent
# connections (nginx with reuseport), 3 runs per size; EDGECACHE_BENCH_CONNS=new
# opens new connections every slice.
bench-edge: setup
	go test -run '^$$' -bench BenchmarkHTTPvsNginx -benchtime 1x -count 3 -timeout 10m ./edgecache

# Interceptor overhead (BENCHMARKS.md, Shedding): the shedding server
# interceptor on a no-op RPC against bare servers (with a bare control), and
# node's server interceptor alone and around a whole loopback call.
bench-interceptor: setup
	go test -run '^$$' -bench 'UnaryOverhead' -benchtime 5000x -count 6 ./shedding
	go test -run '^$$' -bench 'ServerInterceptor' -benchtime 1000000x -count 3 ./shedding
	go test -run '^$$' -bench 'Interceptor' -benchtime 100000x -count 3 ./node
	go test -run '^$$' -bench 'Chain' -benchtime 3000x -count 3 ./node

# Regenerates proto/willow/v1/*.pb.go with the generators pinned in
# scripts/setup.sh (protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.5.1).
proto: setup
	cd proto && protoc -I . \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
	  willow/v1/*.proto

# Runs every fuzz target for FUZZTIME each; found cases land in the
# package's testdata/fuzz and run as regression tests in `make test`.
FUZZTIME ?= 30s
fuzz: setup
	go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./media/
	go test -run '^$$' -fuzz '^FuzzChunks$$' -fuzztime $(FUZZTIME) ./upload/
	go test -run '^$$' -fuzz '^FuzzChunkDecodeInPlace$$' -fuzztime $(FUZZTIME) ./upload/
	go test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./buffer/
	go test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./mediaheader/
	go test -run '^$$' -fuzz '^FuzzParseProfile$$' -fuzztime $(FUZZTIME) ./loadgen/

fmt:
	gofmt -l -w .
