package node

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// rpcMetrics are the gRPC server series of go-grpc-middleware's
// Prometheus provider (providers/prometheus, with the handling-time
// histogram): the same names, help, labels and buckets, so dashboards and
// docs keep working. The provider resolves its label values on every
// call (a hash of four strings per series, several slices); here each
// method's series are resolved once, when the node starts serving
// (init), and a call finds them with one map read.
type rpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec

	mu      sync.Mutex                            // serializes writers of methods
	methods atomic.Pointer[map[string]*rpcSeries] // full method name -> series; replaced whole
}

// rpcSeries are one method's series.
type rpcSeries struct {
	typ, service, method string
	started              prometheus.Counter
	received, sent       prometheus.Counter
	handling             prometheus.Observer
	handled              [numCodes]prometheus.Counter // by code
}

// numCodes is the number of gRPC codes (OK .. Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// gRPC method types, as the provider labels them (grpc_type) and the
// logging interceptor names them (grpc.method_type).
const (
	typeUnary        = string(interceptors.Unary)
	typeClientStream = string(interceptors.ClientStream)
	typeServerStream = string(interceptors.ServerStream)
	typeBidiStream   = string(interceptors.BidiStream)
)

func newRPCMetrics() *rpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	m := &rpcMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server.",
		}, labels),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure.",
		}, append(labels[:3:3], "grpc_code")),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_received_total",
			Help: "Total number of RPC stream messages received on the server.",
		}, labels),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_msg_sent_total",
			Help: "Total number of gRPC stream messages sent by the server.",
		}, labels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets,
		}, labels),
	}
	m.methods.Store(&map[string]*rpcSeries{})
	return m
}

func (m *rpcMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.handling}
}

// init resolves the series of every method registered on s, so that they
// exist (at zero, every code) before the first call, as the provider's
// InitializeMetrics does.
func (m *rpcMetrics) init(s *grpc.Server) {
	for svc, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := typeUnary
			switch {
			case mi.IsClientStream && mi.IsServerStream:
				typ = typeBidiStream
			case mi.IsClientStream:
				typ = typeClientStream
			case mi.IsServerStream:
				typ = typeServerStream
			}
			m.of("/"+svc+"/"+mi.Name, typ)
		}
	}
}

// of returns the series of fullMethod, a method of type typ.
func (m *rpcMetrics) of(fullMethod, typ string) *rpcSeries {
	if s, ok := (*m.methods.Load())[fullMethod]; ok {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.methods.Load()
	if s, ok := old[fullMethod]; ok {
		return s
	}
	svc, method := splitMethod(fullMethod)
	s := &rpcSeries{typ: typ, service: svc, method: method,
		started:  m.started.WithLabelValues(typ, svc, method),
		received: m.received.WithLabelValues(typ, svc, method),
		sent:     m.sent.WithLabelValues(typ, svc, method),
		handling: m.handling.WithLabelValues(typ, svc, method),
	}
	for c := range s.handled {
		s.handled[c] = m.handled.WithLabelValues(typ, svc, method, codes.Code(c).String())
	}
	next := make(map[string]*rpcSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[fullMethod] = s
	m.methods.Store(&next)
	return s
}

// done counts a finished call of code that took seconds.
func (m *rpcMetrics) done(s *rpcSeries, code codes.Code, seconds float64) {
	if int(code) < numCodes {
		s.handled[code].Inc()
	} else {
		m.handled.WithLabelValues(s.typ, s.service, s.method, code.String()).Inc()
	}
	s.handling.Observe(seconds)
}

// splitMethod splits "/service/method" as the provider does ("unknown"
// for both when there is no second slash).
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", "unknown"
}
