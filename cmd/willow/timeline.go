package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	willowv1 "willow/proto/willow/v1"
)

const timelineUsage = "timeline follow FOLLOWER AUTHOR | unfollow FOLLOWER AUTHOR | publish AUTHOR POST_ID [MEDIA_ID...] | poll USER [--cursor C] [--limit N] | stats  (--timeline ADDR | --cluster FILE) [--json]"

// timelineItem is one item of `willow timeline poll --json`.
type timelineItem struct {
	Author   string   `json:"author"`
	PostID   string   `json:"post_id"`
	MediaIDs []string `json:"media_ids"`
	PostedAt string   `json:"posted_at"`
}

func cmdTimeline(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 {
		return usagef("usage: willow %s", timelineUsage)
	}
	sub := args[0]
	fs, g := m.newFlags("timeline " + sub)
	addr := fs.String("timeline", "", "timeline gRPC address (default: from --cluster, or $WILLOW_TIMELINE)")
	cursor := fs.String("cursor", "", "poll: the cursor a previous poll printed (default: from the beginning)")
	limit := fs.Int("limit", 0, "poll: most items to return (default 100)")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[string]func(n int) bool{
		"follow":   func(n int) bool { return n == 2 },
		"unfollow": func(n int) bool { return n == 2 },
		"publish":  func(n int) bool { return n >= 2 },
		"poll":     func(n int) bool { return n == 1 },
		"stats":    func(n int) bool { return n == 0 },
	}
	ok, known := want[sub]
	if !known {
		return usagef("unknown subcommand %q; usage: willow %s", sub, timelineUsage)
	}
	if !ok(len(pos)) {
		return usagef("wrong arguments for %s; usage: willow %s", sub, timelineUsage)
	}
	if *addr == "" {
		if err := g.load(); err != nil {
			return err
		}
		switch {
		case g.file != nil && g.file.Timeline != "":
			*addr = g.file.Timeline
		case m.Getenv("WILLOW_TIMELINE") != "":
			*addr = m.Getenv("WILLOW_TIMELINE")
		default:
			return usagef("need --timeline ADDR or --cluster FILE")
		}
	}
	conn, err := g.dial(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := willowv1.NewTimelineClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := func(text string, obj any) error {
		if g.json {
			return json.NewEncoder(m.Stdout).Encode(obj)
		}
		_, err := fmt.Fprintln(m.Stdout, text)
		return err
	}

	switch sub {
	case "follow", "unfollow":
		req := &willowv1.FollowRequest{Follower: pos[0], Author: pos[1]}
		if sub == "follow" {
			_, err = c.Follow(ctx, req)
		} else {
			_, err = c.Unfollow(ctx, req)
		}
		if err != nil {
			return err
		}
		verb := map[string]string{"follow": "follows", "unfollow": "no longer follows"}[sub]
		return out(fmt.Sprintf("%s %s %s", pos[0], verb, pos[1]),
			map[string]any{"follower": pos[0], "author": pos[1], "following": sub == "follow"})
	case "publish":
		r, err := c.Publish(ctx, &willowv1.PublishRequest{Author: pos[0], PostId: pos[1], MediaIds: pos[2:]})
		if err != nil {
			return err
		}
		return out(fmt.Sprintf("delivered %d held %d", r.GetDelivered(), r.GetHeld()),
			map[string]any{"author": pos[0], "post_id": pos[1], "delivered": r.GetDelivered(), "held": r.GetHeld()})
	case "poll":
		r, err := c.Poll(ctx, &willowv1.PollRequest{User: pos[0], Cursor: *cursor, Limit: int32(*limit)})
		if err != nil {
			return err
		}
		items := make([]timelineItem, 0, len(r.GetItems()))
		var b strings.Builder
		for _, it := range r.GetItems() {
			ti := timelineItem{Author: it.GetAuthor(), PostID: it.GetPostId(), MediaIDs: it.GetMediaIds(),
				PostedAt: time.UnixMilli(it.GetPostedAtUnixMs()).UTC().Format(time.RFC3339Nano)}
			if ti.MediaIDs == nil {
				ti.MediaIDs = []string{}
			}
			items = append(items, ti)
			fmt.Fprintf(&b, "%s %s %s %s\n", ti.PostedAt, ti.Author, ti.PostID, strings.Join(ti.MediaIDs, " "))
		}
		fmt.Fprintf(&b, "cursor %s", r.GetCursor())
		return out(b.String(), map[string]any{"items": items, "cursor": r.GetCursor()})
	default: // stats
		st, err := c.Stats(ctx, &willowv1.TimelineStatsRequest{})
		if err != nil {
			return err
		}
		return out(fmt.Sprintf("held_items %d held_users %d oldest_held_age_ms %d released_total %d release_per_s %.1f",
			st.GetHeldItems(), st.GetHeldUsers(), st.GetOldestHeldAgeMs(), st.GetReleasedTotal(), st.GetReleasePerS()),
			map[string]any{"held_items": st.GetHeldItems(), "held_users": st.GetHeldUsers(),
				"oldest_held_age_ms": st.GetOldestHeldAgeMs(), "released_total": st.GetReleasedTotal(),
				"release_per_s": st.GetReleasePerS()})
	}
}
