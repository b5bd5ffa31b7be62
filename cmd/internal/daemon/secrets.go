package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Placeholder is the value the shipped manifests' Secrets carry until an
// operator fills them in; a daemon refuses to start with it.
const Placeholder = "CHANGE-ME"

// RefusePlaceholder fails when value still contains the shipped
// placeholder (Placeholder, any case), naming what the value is.
func RefusePlaceholder(what, value string) error {
	if strings.Contains(strings.ToUpper(value), Placeholder) {
		return fmt.Errorf("%s is the shipped placeholder %q: set a real value (deploy/k8s/base/secrets.yaml)", what, Placeholder)
	}
	return nil
}

// ReadSecretFile returns the contents of a secret file (a mounted
// Kubernetes Secret key), without the trailing newline editors add.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return v, nil
}

// s3Env completes the S3 credentials after the config file and flags:
// the secret key comes from -s3-secret-key, else -s3-secret-key-file, else
// store.s3.secret_key, else store.s3.secret_key_file, else
// $WILLOW_S3_SECRET_KEY; the access key and bucket from their flags, the
// config, else $WILLOW_S3_ACCESS_KEY and $WILLOW_S3_BUCKET (and, with no
// -store, the endpoint from $WILLOW_S3_ENDPOINT: Parse). Secrets therefore never need to be on the
// command line, where ps shows them.
func (f *Flags) s3Env(c *S3Config) error {
	if *f.s3[3] != "" && *f.s3SecretFile != "" {
		return errors.New("give -s3-secret-key or -s3-secret-key-file, not both")
	}
	if c.SecretKey == "" && c.SecretKeyFile != "" {
		v, err := ReadSecretFile(c.SecretKeyFile)
		if err != nil {
			return fmt.Errorf("S3 secret key: %w", err)
		}
		c.SecretKey = v
	}
	if c.SecretKey == "" {
		c.SecretKey = f.getenv("WILLOW_S3_SECRET_KEY")
	}
	if c.AccessKey == "" {
		c.AccessKey = f.getenv("WILLOW_S3_ACCESS_KEY")
	}
	if c.Bucket == "" {
		c.Bucket = f.getenv("WILLOW_S3_BUCKET")
	}
	return nil
}

func (f *Flags) getenv(k string) string {
	if f.Getenv == nil {
		return ""
	}
	return f.Getenv(k)
}
