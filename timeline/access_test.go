package timeline_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/internal/testenv"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/timeline"
	"willow/token"
	"willow/urlsign"
)

// mediaFunc is a MediaLookup from a function.
type mediaFunc func(ctx context.Context, id string) (*willowv1.Media, error)

func (f mediaFunc) Media(ctx context.Context, id string) (*willowv1.Media, error) { return f(ctx, id) }

// TestTimelineDoors attacks Follow, Publish and Poll through the raw proto
// with real credentials of the wrong user, and checks the legitimate path.
func TestTimelineDoors(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	upSecret := []byte("upload-secret")
	key := urlsign.Key{ID: "k1", Secret: strings.Repeat("k", 32)}
	mediaOf := func(user, upload string) string {
		return media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor(user, upload)}.String()
	}
	alicePhoto, aliceVideo, bobPhoto := mediaOf("alice", "p1"), mediaOf("alice", "v1"), mediaOf("bob", "p1")
	owners := map[string]*willowv1.Media{
		alicePhoto: {User: "alice", Kind: willowv1.Kind_KIND_IMAGE},
		aliceVideo: {User: "alice", Kind: willowv1.Kind_KIND_VIDEO},
		bobPhoto:   {User: "bob", Kind: willowv1.Kind_KIND_IMAGE},
	}
	lookup := mediaFunc(func(_ context.Context, id string) (*willowv1.Media, error) {
		if m, ok := owners[id]; ok {
			return m, nil
		}
		return nil, status.Error(codes.NotFound, "no such media")
	})
	now := time.Unix(1_800_000_000, 0)
	n, err := node.New(node.Config{ID: "tl-doors", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler),
		Auth: &auth.Config{ClusterSecret: "cluster-secret", UploadSecret: upSecret}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := timeline.New(timeline.Config{URLKeys: []urlsign.Key{key}, KeyPrefix: "doors:"},
		timeline.Deps{Node: n, Redis: rdb, Media: lookup, Now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	dial := func(creds credentials.PerRPCCredentials) willowv1.TimelineClient {
		conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return willowv1.NewTimelineClient(conn)
	}
	tokenOf := func(user string) auth.Bearer {
		tok, err := token.Sign(upSecret, user, "moments", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return auth.Bearer(tok)
	}
	alice, bob, carol := dial(tokenOf("alice")), dial(tokenOf("bob")), dial(tokenOf("carol"))
	graph := dial(auth.NodeCredentials{Secret: "cluster-secret", ID: "graph-sync", Role: "graph", Instance: "i"})
	nobody := dial(auth.Bearer(""))

	denied := func(t *testing.T, err error, code codes.Code, reason string) {
		t.Helper()
		if status.Code(err) != code || (reason != "" && rpcstatus.Reason(err) != reason) {
			t.Fatalf("got %v (reason %q), want %v %q", err, rpcstatus.Reason(err), code, reason)
		}
	}
	t.Run("follow as another user", func(t *testing.T) {
		_, err := alice.Follow(ctx, &willowv1.FollowRequest{Follower: "bob", Author: "carol"})
		denied(t, err, codes.PermissionDenied, auth.ReasonOtherUser)
	})
	t.Run("unfollow as another user", func(t *testing.T) {
		_, err := alice.Unfollow(ctx, &willowv1.FollowRequest{Follower: "bob", Author: "alice"})
		denied(t, err, codes.PermissionDenied, auth.ReasonOtherUser)
	})
	t.Run("follow without credentials", func(t *testing.T) {
		_, err := nobody.Follow(ctx, &willowv1.FollowRequest{Follower: "bob", Author: "alice"})
		denied(t, err, codes.Unauthenticated, "")
	})
	t.Run("follow with a forged token", func(t *testing.T) {
		forged, _ := token.Sign([]byte("guessed"), "bob", "moments", time.Now().Add(time.Hour))
		_, err := dial(auth.Bearer(forged)).Follow(ctx, &willowv1.FollowRequest{Follower: "bob", Author: "alice"})
		denied(t, err, codes.Unauthenticated, "")
	})
	t.Run("follow by the follower's own token", func(t *testing.T) {
		if _, err := bob.Follow(ctx, &willowv1.FollowRequest{Follower: "bob", Author: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Follow(ctx, &willowv1.FollowRequest{Author: "carol"}); err != nil { // empty follower: the token's
			t.Fatal(err)
		}
	})
	t.Run("graph system follows for anyone with a node credential", func(t *testing.T) {
		if _, err := graph.Follow(ctx, &willowv1.FollowRequest{Follower: "carol", Author: "alice"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("post as another user", func(t *testing.T) {
		_, err := bob.Publish(ctx, &willowv1.PublishRequest{Author: "alice", PostId: "fake", MediaIds: []string{alicePhoto}})
		denied(t, err, codes.PermissionDenied, auth.ReasonOtherUser)
	})
	t.Run("post another user's media", func(t *testing.T) {
		_, err := alice.Publish(ctx, &willowv1.PublishRequest{Author: "alice", PostId: "stolen", MediaIds: []string{alicePhoto, bobPhoto}})
		denied(t, err, codes.PermissionDenied, timeline.ReasonNotMediaOwner)
	})
	t.Run("post media that does not exist", func(t *testing.T) {
		_, err := alice.Publish(ctx, &willowv1.PublishRequest{Author: "alice", PostId: "ghost", MediaIds: []string{mediaOf("alice", "never")}})
		denied(t, err, codes.InvalidArgument, timeline.ReasonUnknownMedia)
	})
	t.Run("post own media", func(t *testing.T) {
		r, err := alice.Publish(ctx, &willowv1.PublishRequest{PostId: "p1", MediaIds: []string{alicePhoto, aliceVideo}})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetDelivered() != 3 { // alice, bob, carol
			t.Fatalf("delivered %d, want 3", r.GetDelivered())
		}
	})
	t.Run("read another user's inbox", func(t *testing.T) {
		_, err := alice.Poll(ctx, &willowv1.PollRequest{User: "bob"})
		denied(t, err, codes.PermissionDenied, auth.ReasonOtherUser)
	})
	t.Run("poll own inbox: media as urls signed for the poller", func(t *testing.T) {
		kr, _ := urlsign.New([]urlsign.Key{key})
		for _, who := range []struct {
			name string
			c    willowv1.TimelineClient
		}{{"bob", bob}, {"carol", carol}} {
			r, err := who.c.Poll(ctx, &willowv1.PollRequest{}) // empty user: the token's
			if err != nil {
				t.Fatal(err)
			}
			if len(r.GetItems()) != 1 || len(r.GetItems()[0].GetMedia()) != 2 {
				t.Fatalf("%s: items %v", who.name, r.GetItems())
			}
			want := map[string][]string{alicePhoto: {"thumb", "medium", "large"}, aliceVideo: {"video", "poster"}}
			for _, l := range r.GetItems()[0].GetMedia() {
				if len(l.GetUrls()) != len(want[l.GetMediaId()]) {
					t.Fatalf("%s: %s urls %v, want variants %v", who.name, l.GetMediaId(), l.GetUrls(), want[l.GetMediaId()])
				}
				if _, raw := l.GetUrls()["raw"]; raw {
					t.Fatalf("raw signed for the feed: %v", l.GetUrls())
				}
				for _, v := range want[l.GetMediaId()] {
					u, err := url.Parse(l.GetUrls()[v])
					if err != nil {
						t.Fatal(err)
					}
					id, variant, ok := urlsign.ParsePath(u.Path)
					sig := urlsign.FromQuery(u.Query())
					if !ok || id != l.GetMediaId() || variant != v || sig.User != who.name {
						t.Fatalf("%s: url %s", who.name, u)
					}
					if err := kr.Verify(id, variant, sig, now); err != nil {
						t.Fatalf("%s: url %s: %v", who.name, u, err)
					}
				}
			}
		}
	})
	t.Run("graph system polls for anyone with a node credential", func(t *testing.T) {
		r, err := graph.Poll(ctx, &willowv1.PollRequest{User: "bob"})
		if err != nil || len(r.GetItems()) != 1 {
			t.Fatalf("poll: %v %v", r, err)
		}
	})
}
