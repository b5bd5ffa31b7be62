package daemon

import (
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
