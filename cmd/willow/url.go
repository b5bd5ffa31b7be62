package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"willow/media"
	"willow/urlsign"
)

// cmdURL prints a signed download URL.
func cmdURL(_ context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("url")
	variant := fs.String("variant", media.VariantRaw, "variant: thumb, medium, large, raw (photos); video, poster, raw (videos)")
	ttl := fs.Duration("for", time.Hour, "how long the URL is valid")
	edge := fs.String("edge", "", "edge cache HTTP address HOST:PORT (default: the region's, from --cluster)")
	region := fs.String("region", "a", "region whose edge cache the URL names (with --cluster)")
	user := fs.String("user", "", "the user the URL is signed for (admission ranks the download by it)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("need exactly one media ID")
	}
	if _, err := media.Parse(pos[0]); err != nil {
		return usagef("%v", err)
	}
	if !media.ValidVariant(*variant) {
		return usagef("unknown variant %q", *variant)
	}
	if *ttl <= 0 {
		return usagef("--for must be positive")
	}
	keys, err := g.urlKeys()
	if err != nil {
		return err
	}
	if keys == nil {
		return errors.New("no URL keys: pass --cluster FILE (its url_keys sign)")
	}
	if *edge == "" && g.file != nil {
		*edge = g.file.Regions[*region].EdgecacheHTTP
	}
	if *edge == "" {
		return usagef("need --edge HOST:PORT or --cluster FILE")
	}
	base := *edge
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + keys.URL(pos[0], *variant, *user, time.Now().Add(*ttl))
	_, err = fmt.Fprintln(m.Stdout, u)
	return err
}

// urlKeys returns the download URL keyring from --cluster, nil when the
// file has none.
func (g *globals) urlKeys() (*urlsign.Keyring, error) {
	if err := g.load(); err != nil {
		return nil, err
	}
	if g.file == nil || len(g.file.URLKeys) == 0 {
		return nil, nil
	}
	return urlsign.New(g.file.URLKeys)
}
