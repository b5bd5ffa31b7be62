package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"willow/flex"
	"willow/token"
)

// cmdToken prints a development upload token signed with the cluster's
// upload secret (--cluster FILE or $WILLOW_UPLOAD_SECRET).
func cmdToken(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("token")
	user := fs.String("user", "", "user the token is for (required)")
	business := fs.String("business", flex.DefaultBusiness, "business the token is for")
	ttl := fs.Duration("ttl", time.Hour, "validity")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *user == "" {
		return usagef("need --user U")
	}
	if *ttl <= 0 {
		return usagef("--ttl must be positive")
	}
	secret := g.uploadSecret()
	if secret == "" {
		return errors.New("no upload secret: give --cluster FILE or set WILLOW_UPLOAD_SECRET")
	}
	tok, err := token.Sign([]byte(secret), *user, *business, time.Now().Add(*ttl))
	if err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, tok)
	return nil
}
