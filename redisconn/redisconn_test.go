package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/redisconn"
)

func TestOpenURLs(t *testing.T) {
	tests := []struct {
		url     string
		cluster bool
		addrs   []string
		db      int
		user    string
		pass    string
		bad     string // substring of the error; "" means no error
	}{
		{url: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{url: "redis://127.0.0.1:6380/3", addrs: []string{"127.0.0.1:6380"}, db: 3},
		{url: "redis://u:secret@h:1/0?dial_timeout=2s", addrs: []string{"h:1"}, user: "u", pass: "secret"},
		{url: "rediss://h:6379", addrs: []string{"h:6379"}},
		{url: "redis-cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002", cluster: true,
			addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{url: "redis-cluster://a:1", cluster: true, addrs: []string{"a:1"}},
		{url: "redis-cluster://a", cluster: true, addrs: []string{"a:6379"}},
		{url: "redis-cluster://[::1]:7000,b:7001/", cluster: true, addrs: []string{"[::1]:7000", "b:7001"}},
		{url: "redis-cluster://:pw@a:1,b:2?max_redirects=5", cluster: true, addrs: []string{"a:1", "b:2"}, pass: "pw"},
		{url: "rediss-cluster://a:1,b:2", cluster: true, addrs: []string{"a:1", "b:2"}},
		{url: "", bad: "want redis://"},
		{url: "127.0.0.1:6379", bad: "want redis://"},
		{url: "http://h:1", bad: `unknown scheme "http"`},
		{url: "redis://h:1/x", bad: "invalid database"},
		{url: "redis-cluster://", bad: "no host"},
		{url: "redis-cluster://a:1,,b:2", bad: "empty host"},
		{url: "redis-cluster://a:1,b:2/2", bad: "no database"},
		{url: "redis-cluster://a:1:2", bad: "host"},
		{url: "redis-cluster://:1", bad: "no name"},
		{url: "redis-cluster://a:1?addr=b:2", bad: "addr="},
		{url: "redis-cluster://u:hunter2@a:1/9", bad: "no database"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := redisconn.Open(tt.url)
			if tt.bad != "" {
				if err == nil {
					c.Close()
					t.Fatalf("no error, want one containing %q", tt.bad)
				}
				msg := err.Error()
				if !errors.Is(err, redisconn.ErrBadURL) || !strings.Contains(msg, tt.bad) || strings.Contains(msg, "\n") {
					t.Errorf("error %q: want one line wrapping ErrBadURL, containing %q", msg, tt.bad)
				}
				if strings.Contains(msg, "hunter2") {
					t.Errorf("error %q shows the password", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if redisconn.IsCluster(c) != tt.cluster {
				t.Fatalf("IsCluster = %v", !tt.cluster)
			}
			var addrs []string
			var db int
			var user, pass string
			switch c := c.(type) {
			case *redis.Client:
				o := c.Options()
				addrs, db, user, pass = []string{o.Addr}, o.DB, o.Username, o.Password
			case *redis.ClusterClient:
				o := c.Options()
				addrs, user, pass = o.Addrs, o.Username, o.Password
			}
			if fmt.Sprint(addrs) != fmt.Sprint(tt.addrs) || db != tt.db || user != tt.user || pass != tt.pass {
				t.Errorf("addrs %v db %d user %q pass %q, want %v %d %q %q", addrs, db, user, pass, tt.addrs, tt.db, tt.user, tt.pass)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0":          "redis://u:xxxxx@h:1/0",
		"redis-cluster://:pw@a:1,b:2": "redis-cluster://:xxxxx@a:1,b:2",
		"redis://h:1":                 "redis://h:1",
		"redis://u@h:1":               "redis://u@h:1",
	} {
		if got := redisconn.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOneSlot(t *testing.T) {
	for in, want := range map[string]string{
		"willow:":    "{willow:}",
		"{w}:":       "{w}:",
		"a{b}c:":     "a{b}c:",
		"a{b":        "{a{b}",
		"":           "{willow}",
		"}x":         "{willow}}x",
		"a{}b:":      "{a{}b:}",
		"willow:tl:": "{willow:tl:}",
	} {
		got := redisconn.OneSlot(in)
		if got != want {
			t.Errorf("OneSlot(%q) = %q, want %q", in, got, want)
		}
		if a, b := redisconn.Slot(got+"node:x"), redisconn.Slot(got+"flex:doc"); a != b {
			t.Errorf("OneSlot(%q): keys in slots %d and %d", in, a, b)
		}
	}
}

// TestSlotMatchesCluster checks Slot against CLUSTER KEYSLOT of a real
// cluster, and that the cluster client from a redis-cluster:// URL
// reaches keys on every master.
func TestSlotMatchesCluster(t *testing.T) {
	if got := redisconn.Slot("foo"); got != 12182 {
		t.Errorf("Slot(foo) = %d, want 12182 (the Redis Cluster spec's example)", got)
	}
	begin := time.Now()
	rc := testenv.StartRedisCluster(t)
	t.Logf("3-master cluster up in %v", time.Since(begin))
	c := rc.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keys := []string{"", "foo", "{user1000}.following", "{user1000}.followers", "a{}b", "{}", "}{", "{a}{b}",
		"willow:tl:in:{alice}", "willow:tl:h:{alice}", "é€", "x{y"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	nodes := map[string]bool{}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisconn.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
		if k == "" {
			continue
		}
		if err := c.Set(ctx, k, k, time.Minute).Err(); err != nil {
			t.Fatalf("set %q: %v", k, err)
		}
		m, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		nodes[m.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Errorf("keys landed on %d masters, want 3", len(nodes))
	}
	if redisconn.Slot("willow:tl:in:{alice}") != redisconn.Slot("willow:tl:h:{alice}") {
		t.Error("one user's inbox and held set are in different slots")
	}
}

func TestSameSlot(t *testing.T) {
	for _, tt := range []struct {
		key, want string
		ok        bool
	}{
		{"willow:upload:upload-a-1:compress", "{willow:upload:upload-a-1:compress}:jobs", true},
		{"j{x}", "j{x}:jobs", true},
		{"a{b", "{a{b}:jobs", true},
		{"a}b", "", false},
		{"", "", false},
	} {
		got, ok := redisconn.SameSlot(tt.key, ":jobs")
		if got != tt.want || ok != tt.ok {
			t.Errorf("SameSlot(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
		}
		if ok && redisconn.Slot(got) != redisconn.Slot(tt.key) {
			t.Errorf("SameSlot(%q) = %q: slot %d, key's %d", tt.key, got, redisconn.Slot(got), redisconn.Slot(tt.key))
		}
	}
}
