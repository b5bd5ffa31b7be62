package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// mediaLine is `willow media status ID --json`: one object.
type mediaLine struct {
	ID       string        `json:"id"`
	State    string        `json:"state"` // processing | ready | failed
	Reason   string        `json:"reason"`
	Error    string        `json:"error,omitempty"`
	Location string        `json:"location,omitempty"`
	Kind     string        `json:"kind,omitempty"`
	Business string        `json:"business,omitempty"`
	Size     int64         `json:"size,omitempty"`
	Attempts int32         `json:"attempts,omitempty"`
	Variants []variantLine `json:"variants"`
	Front    string        `json:"front,omitempty"`
}

type variantLine struct {
	Name   string `json:"name"`
	Codec  string `json:"codec,omitempty"`
	Width  int32  `json:"width,omitempty"`
	Height int32  `json:"height,omitempty"`
	Bytes  int64  `json:"bytes"`
}

func cmdMedia(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 {
		return usagef("media status ID [--json] | retry ID")
	}
	sub, args := args[0], args[1:]
	fs, g := m.newFlags("media " + sub)
	addr := fs.String("addr", "", "upload front address (default: the front named in the media ID, else one of its region)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("media %s needs one media ID", sub)
	}
	id, err := media.Parse(pos[0])
	if err != nil {
		return fmt.Errorf("INVALID_ARGUMENT bad_media_id: %v", err)
	}
	f, err := frontFor(ctx, g, *addr, id)
	if err != nil {
		return err
	}
	var line mediaLine
	err = withFront(g, f, func(c willowv1.UploadClient) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var md *willowv1.Media
		var err error
		switch sub {
		case "status":
			md, err = c.GetMedia(cctx, &willowv1.GetMediaRequest{MediaId: id.String()})
			if status.Code(err) == codes.NotFound && rpcstatus.Reason(err) == media.ReasonProcessing {
				// A pool-1 item: acknowledged, not drained yet.
				md, err = &willowv1.Media{MediaId: id.String(), State: "processing", Location: "pool1"}, nil
			}
		case "retry":
			md, err = c.RetryMedia(cctx, &willowv1.RetryMediaRequest{MediaId: id.String()})
		default:
			return usagef("unknown media command %q (status ID | retry ID)", sub)
		}
		if err != nil {
			return err
		}
		line = mediaLineOf(md)
		line.Front = f.id
		return nil
	})
	if err != nil {
		return err
	}
	if g.json {
		return json.NewEncoder(m.Stdout).Encode(line)
	}
	fmt.Fprintf(m.Stdout, "%s %s", line.ID, line.State)
	if line.Reason != "" {
		fmt.Fprintf(m.Stdout, " %s: %s", line.Reason, line.Error)
	}
	fmt.Fprintln(m.Stdout)
	for _, v := range line.Variants {
		fmt.Fprintf(m.Stdout, "  %s %s %dx%d %d bytes\n", v.Name, v.Codec, v.Width, v.Height, v.Bytes)
	}
	return nil
}

func mediaLineOf(md *willowv1.Media) mediaLine {
	l := mediaLine{ID: md.GetMediaId(), State: md.GetState(), Reason: md.GetReason(), Error: md.GetError(),
		Location: md.GetLocation(), Business: md.GetBusiness(), Size: md.GetSize(), Attempts: md.GetAttempts(),
		Variants: []variantLine{}}
	if md.GetKind() != willowv1.Kind_KIND_UNSPECIFIED {
		l.Kind = strings.ToLower(strings.TrimPrefix(md.GetKind().String(), "KIND_"))
	}
	for _, v := range md.GetVariants() {
		l.Variants = append(l.Variants, variantLine{Name: v.GetName(), Codec: v.GetCodec(), Width: v.GetWidth(), Height: v.GetHeight(), Bytes: v.GetBytes()})
	}
	return l
}

// frontFor picks the upload front to ask about id: --addr, else the front
// named in the ID (it holds pool items), else one of the ID's region, else
// any front.
func frontFor(ctx context.Context, g *globals, addr string, id media.ID) (front, error) {
	fr, err := fronts(ctx, g, addr)
	if err != nil {
		return front{}, err
	}
	for _, f := range fr {
		if f.id == id.Node {
			return f, nil
		}
	}
	for _, f := range fr {
		if f.region == id.Region {
			return f, nil
		}
	}
	return fr[0], nil
}
