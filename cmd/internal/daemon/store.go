package daemon

import (
	"errors"
	"fmt"
	"path/filepath"

	"willow/buffer"
	"willow/store"
	fsstore "willow/store/fs"
	"willow/store/s3"
)

// StoreConfig is the store: section of the config file of every service
// with an object store (upload, compress, edgecache): a directory store
// (dir) or an S3 store (s3).
type StoreConfig struct {
	// Dir is the directory store's root; -store.
	Dir string   `yaml:"dir"`
	S3  S3Config `yaml:"s3"`
}

// S3Config is an S3 store in a config file.
type S3Config struct {
	Endpoint  string `yaml:"endpoint"`
	Bucket    string `yaml:"bucket"`
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
	// SecretKeyFile names a file holding the secret key (a mounted
	// Secret); see storeEnv for the order of the sources.
	SecretKeyFile string `yaml:"secret_key_file"`
	Region        string `yaml:"region"`
	Secure        bool   `yaml:"secure"`
	PartSize      int64  `yaml:"part_size"`
}

// storeFlags are the store: section's flags (StoreConfig's keys) but
// the S3 secret key's (s3SecretFlags).
var storeFlags = []Flag{
	{Name: "store", Key: "dir", Usage: "directory store root"},
	{Name: "s3-endpoint", Key: "s3.endpoint", Usage: "S3 endpoint host:port (instead of -store; default $WILLOW_S3_ENDPOINT)"},
	{Name: "s3-bucket", Key: "s3.bucket", Usage: "S3 bucket (default $WILLOW_S3_BUCKET)"},
	{Name: "s3-access-key", Key: "s3.access_key", Usage: "S3 access key (default $WILLOW_S3_ACCESS_KEY)"},
}

// s3SecretFlags registers -s3-secret-key and -s3-secret-key-file, bound
// to st; storeEnv refuses both given.
func (d *Daemon) s3SecretFlags(st *StoreConfig) {
	d.FS.Func("s3-secret-key", "S3 secret key; visible in ps: prefer $WILLOW_S3_SECRET_KEY or -s3-secret-key-file", func(v string) error {
		st.S3.SecretKey, d.s3Flag = v, true
		return nil
	})
	d.FS.Func("s3-secret-key-file", "file holding the S3 secret key (a mounted Secret)", func(v string) error {
		st.S3.SecretKey, st.S3.SecretKeyFile, d.s3FileFlag = "", v, true
		return nil
	})
}

// storeEnv completes the store section after the config file and flags:
// the S3 secret key comes from -s3-secret-key, else -s3-secret-key-file,
// else store.s3.secret_key, else store.s3.secret_key_file, else
// $WILLOW_S3_SECRET_KEY; the access key and bucket from their flags, the
// config, else $WILLOW_S3_ACCESS_KEY and $WILLOW_S3_BUCKET; and, with no
// directory store, the endpoint from $WILLOW_S3_ENDPOINT. Secrets
// therefore never need to be on the command line, where ps shows them.
func (d *Daemon) storeEnv(st *StoreConfig) error {
	c := &st.S3
	if d.s3Flag && d.s3FileFlag {
		return errors.New("give -s3-secret-key or -s3-secret-key-file, not both")
	}
	if c.Endpoint == "" && st.Dir == "" {
		c.Endpoint = d.Getenv("WILLOW_S3_ENDPOINT")
	}
	if c.SecretKey == "" && c.SecretKeyFile != "" {
		v, err := ReadSecretFile(c.SecretKeyFile)
		if err != nil {
			return fmt.Errorf("S3 secret key: %w", err)
		}
		c.SecretKey = v
	}
	d.Default(&c.SecretKey, "WILLOW_S3_SECRET_KEY")
	d.Default(&c.AccessKey, "WILLOW_S3_ACCESS_KEY")
	d.Default(&c.Bucket, "WILLOW_S3_BUCKET")
	return nil
}

// OpenStore opens the S3 store when st names an endpoint, else the
// directory store at st.Dir.
func OpenStore(st StoreConfig) (store.Store, error) {
	s3c := st.S3
	switch {
	case s3c.Endpoint != "" && st.Dir != "":
		return nil, errors.New("give -store or -s3-endpoint, not both")
	case s3c.Endpoint != "":
		if err := RefusePlaceholder("S3 access key", s3c.AccessKey); err != nil {
			return nil, err
		}
		if err := RefusePlaceholder("S3 secret key", s3c.SecretKey); err != nil {
			return nil, err
		}
		return s3.New(s3.Config{Endpoint: s3c.Endpoint, Bucket: s3c.Bucket, AccessKey: s3c.AccessKey,
			SecretKey: s3c.SecretKey, Region: s3c.Region, Secure: s3c.Secure, PartSize: s3c.PartSize})
	case st.Dir != "":
		return fsstore.New(st.Dir)
	}
	return nil, errors.New("need -store DIR or -s3-endpoint (or the store: section of the config)")
}

// Pools opens the upload front's buffer pools, pool1/ and pool2/ under
// dir, on the node's registry; they close with the daemon. An empty dir
// runs without pools (both nil). Call it after Start.
func (d *Daemon) Pools(dir string) (pool1, pool2 *buffer.Pool, err error) {
	if dir == "" {
		return nil, nil, nil
	}
	var ps [2]*buffer.Pool
	for i := range ps {
		name := fmt.Sprint("pool", i+1)
		p, err := buffer.Open(filepath.Join(dir, name), buffer.Options{Name: name, Registerer: d.Node.Registry(), Logger: d.Log})
		if err != nil {
			return nil, nil, err
		}
		d.onClose(func() { p.Close() })
		ps[i] = p
	}
	return ps[0], ps[1], nil
}
