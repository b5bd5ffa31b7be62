// Package redisconn opens Willow's Redis connections from one URL form,
// for one server or a Redis Cluster, and holds the cluster's key-slot
// rules that the services use to keep keys of one script in one slot.
//
// URLs (every service's -redis flag and `willow up --redis`):
//
//	redis://[user:password@]host:port[/db][?option=value...]   one server (rediss:// for TLS)
//	redis-cluster://[user:password@]host1:port,host2:port,...[?option=value...]   a Redis Cluster
//
// The options are go-redis's URL options (dial_timeout, read_timeout,
// pool_size, ...). A cluster has no database number: a path other than
// "/" or "/0" is an error. The cluster addresses are seeds: the client
// learns the rest of the cluster from them.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/iostat"
)

// Scheme names of the URL forms.
const (
	SchemeRedis        = "redis"
	SchemeRedisTLS     = "rediss"
	SchemeCluster      = "redis-cluster"
	SchemeClusterTLS   = "rediss-cluster"
	defaultClusterPort = "6379"
)

// ErrBadURL is wrapped by every URL parse error.
var ErrBadURL = errors.New("bad redis URL")

// Open returns a client for rawURL: a *redis.Client for redis:// and
// rediss://, a *redis.ClusterClient for redis-cluster:// and
// rediss-cluster://. It does not dial; the first command does. A URL it
// cannot parse is an error wrapping ErrBadURL, on one line, with any
// password replaced by "xxxxx".
func Open(rawURL string) (redis.UniversalClient, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, badURL(rawURL, "want redis://host:port/db or redis-cluster://host1:port,host2:port,...")
	}
	switch scheme {
	case SchemeRedis, SchemeRedisTLS:
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, badURL(rawURL, strings.TrimPrefix(err.Error(), "redis: "))
		}
		opt.Dialer = countedDialer(opt.DialTimeout, opt.TLSConfig)
		return redis.NewClient(opt), nil
	case SchemeCluster, SchemeClusterTLS:
		opt, err := parseCluster(rawURL)
		if err != nil {
			return nil, err
		}
		opt.Dialer = countedDialer(opt.DialTimeout, opt.TLSConfig)
		return redis.NewClusterClient(opt), nil
	}
	return nil, badURL(rawURL, fmt.Sprintf("unknown scheme %q (want redis, rediss, redis-cluster or rediss-cluster)", scheme))
}

// parseCluster parses a redis-cluster:// URL into go-redis cluster
// options, through go-redis's own cluster URL parser for the options.
func parseCluster(rawURL string) (*redis.ClusterOptions, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	rest, query, _ := strings.Cut(rest, "?")
	var user string
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		user, rest = rest[:i+1], rest[i+1:]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if path != "" && path != "0" {
		return nil, badURL(rawURL, fmt.Sprintf("a Redis Cluster has no database %q (only 0)", path))
	}
	if hosts == "" {
		return nil, badURL(rawURL, "no host")
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, badURL(rawURL, "empty host in the list")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port: the default one.
			host, port = h, defaultClusterPort
			if strings.ContainsAny(h, "[]") || strings.Count(h, ":") > 0 {
				return nil, badURL(rawURL, fmt.Sprintf("host %q: %v", h, err))
			}
		}
		if host == "" {
			return nil, badURL(rawURL, fmt.Sprintf("host %q has no name", h))
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, badURL(rawURL, err.Error())
	}
	if len(q["addr"]) > 0 {
		return nil, badURL(rawURL, "list the cluster's hosts before the path, not as addr= options")
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	base := "redis"
	if scheme == SchemeClusterTLS {
		base = "rediss"
	}
	opt, err := redis.ParseClusterURL(base + "://" + user + addrs[0] + "?" + q.Encode())
	if err != nil {
		return nil, badURL(rawURL, strings.TrimPrefix(err.Error(), "redis: "))
	}
	return opt, nil
}

func badURL(rawURL, why string) error {
	return fmt.Errorf("%w %q: %s", ErrBadURL, Redact(rawURL), why)
}

// Redact returns rawURL with the password, if any, replaced by "xxxxx",
// for logs and error messages.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	hostEnd := strings.IndexAny(rest, "/?")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	at := strings.LastIndexByte(rest[:hostEnd], '@')
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return rawURL
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// IsCluster reports whether c is a Redis Cluster client, whose scripts
// and transactions must keep to one slot.
func IsCluster(c any) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// countedDialer dials as go-redis does by default (TCP, keep-alive, its
// dial timeout, TLS when the URL is rediss://) through package iostat, so
// Redis traffic counts in heartbeats. With TLS the bytes counted are the
// ones on the wire, records and handshake included.
func countedDialer(timeout time.Duration, tlsConfig *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	dial := iostat.Dial(&net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute})
	if tlsConfig == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tlsConfig
		if cfg.ServerName == "" {
			// As tls.DialWithDialer does: verify against the host dialled.
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn := tls.Client(raw, cfg)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}
