package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"willow/client"
	"willow/flex"
	"willow/token"
)

// cmdUpload uploads files, printing one JSON line per file.
func cmdUpload(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("upload")
	uploadID := fs.String("upload-id", "", "client upload ID (default: from the content hash); only with one file")
	user := fs.String("user", "u1", "user ID")
	business := fs.String("business", flex.DefaultBusiness, "business")
	region := fs.String("region", "a", "the caller's region")
	tok := fs.String("upload-token", "", "upload token (default: signed with the cluster's development secret)")
	files, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("no files to upload")
	}
	if *uploadID != "" && len(files) > 1 {
		return usagef("--upload-id needs exactly one file")
	}
	c, err := g.client(*region)
	if err != nil {
		return err
	}
	defer c.Router.Close()
	if *tok != "" {
		c.Token = func(string, string) (string, error) { return *tok, nil }
	}
	enc := json.NewEncoder(m.Stdout)
	for _, f := range files {
		res, err := c.UploadFile(ctx, f, client.UploadOptions{UploadID: *uploadID, User: *user, Business: *business})
		if errors.Is(err, client.ErrMediaFailed) {
			// Acknowledged but unusable: print the line (state failed,
			// reason) and exit non-zero.
			if eerr := enc.Encode(res); eerr != nil {
				return eerr
			}
			return fmt.Errorf("%s: FAILED_PRECONDITION %s: %s", f, res.Reason, res.Error)
		}
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return nil
}

// client returns an SDK client routed through the master.
func (g *globals) client(region string) (*client.Client, error) {
	addr, err := g.masterAddr()
	if err != nil {
		return nil, err
	}
	t, err := g.clientTLS()
	if err != nil {
		return nil, err
	}
	r, err := client.NewRouter(client.RouterConfig{MasterAddr: addr, Region: region, TLS: t})
	if err != nil {
		return nil, err
	}
	return &client.Client{Router: r, Token: g.signToken}, nil
}

// signToken mints a development upload token for (user, business) with
// the upload secret of --cluster or $WILLOW_UPLOAD_SECRET: the credential
// the SDK presents on every upload and download call.
func (g *globals) signToken(user, business string) (string, error) {
	secret := g.uploadSecret()
	if secret == "" {
		return "", errors.New("no upload token: pass --upload-token, --cluster FILE or set WILLOW_UPLOAD_SECRET")
	}
	return token.Sign([]byte(secret), user, business, time.Now().Add(time.Hour))
}
