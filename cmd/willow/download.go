package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"willow/client"
	"willow/flex"
	willowv1 "willow/proto/willow/v1"
)

// cmdDownload downloads one variant of a media item to a file.
func cmdDownload(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("download")
	variant := fs.String("variant", "raw", "variant: thumb, medium, large, raw (photos); video, poster, raw (videos)")
	out := fs.String("o", "", "output file (required; - for stdout)")
	region := fs.String("region", "a", "the caller's region")
	user := fs.String("user", "u1", "user ID (admission and shedding decide per user)")
	business := fs.String("business", flex.DefaultBusiness, "business the download is for")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("need exactly one media ID")
	}
	if *out == "" {
		return usagef("need -o FILE")
	}
	c, err := g.client(*region)
	if err != nil {
		return err
	}
	defer c.Router.Close()
	if c.URLKeys, err = g.urlKeys(); err != nil {
		return err
	}
	ctx = client.WithRequest(ctx, *business, *user)
	// A signed URL (willow url, the timeline's Poll) carries its own
	// signature; a media ID is signed here with the cluster's URL keys.
	download := func(w io.Writer) (*willowv1.DataChunk, error) {
		if strings.Contains(pos[0], "/m/") {
			return c.DownloadURL(ctx, pos[0], w)
		}
		return c.Download(ctx, pos[0], *variant, w)
	}
	if *out == "-" {
		_, err := download(m.Stdout)
		return err
	}
	// Write to a temporary file and rename, so a failed download leaves
	// no partial output.
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".willow-download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	head, err := download(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	if g.json {
		fmt.Fprintf(m.Stdout, "{\"id\":%q,\"variant\":%q,\"bytes\":%d,\"content_type\":%q,\"etag\":%q,\"file\":%q}\n",
			pos[0], *variant, head.GetSize(), head.GetContentType(), head.GetEtag(), *out)
	}
	return nil
}
