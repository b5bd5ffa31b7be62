package cluster

import (
	"encoding/json"
	"fmt"
	"os"

	"willow/auth"
	"willow/urlsign"
)

// File is DIR/cluster.json as `willow up` and deploy/local write it
// (DESIGN.md section 8): addresses plus the development secrets, so other
// commands can take --cluster FILE.
type File struct {
	Master       string `json:"master"`
	Console      string `json:"console"`
	Redis        string `json:"redis"`
	Timeline     string `json:"timeline"`
	OncallToken  string `json:"oncall_token"`
	UploadSecret string `json:"upload_secret"`
	// URLKeys sign download URLs (package urlsign): the first signs, all
	// verify.
	URLKeys []urlsign.Key `json:"url_keys,omitempty"`
	// ClusterSecret is what the nodes authenticate to each other with
	// (package auth); Operators the identities file the masters load, in
	// which OncallToken is the developer's identity.
	ClusterSecret string            `json:"cluster_secret,omitempty"`
	Operators     string            `json:"operators,omitempty"`
	Regions       map[string]Region `json:"regions"`
	Nodes         []FileNode        `json:"nodes,omitempty"`
}

// Region lists one region's service addresses.
type Region struct {
	Upload        string `json:"upload"`
	Compress      string `json:"compress"`
	EdgecacheGRPC string `json:"edgecache_grpc"`
	EdgecacheHTTP string `json:"edgecache_http"`
	// UploadHTTP is the base URL of the upload front's tus / IETF
	// resumable-upload endpoint, e.g. http://127.0.0.1:PORT/files/.
	UploadHTTP string `json:"upload_http,omitempty"`
}

// FileNode is one node of the cluster: in deploy/local one process each
// (redis and s3 too, without an admin address); in `willow up` the nodes
// of the one process, masters included.
type FileNode struct {
	// ID is the node's ID (in deploy/local, its process name).
	ID     string `json:"id,omitempty"`
	Role   string `json:"role"`
	Region string `json:"region"`
	// Addr is the node's gRPC address (redis, s3: their own).
	Addr string `json:"addr"`
	// Admin is the node's admin HTTP address: /metrics, /healthz and
	// /debug/pprof.
	Admin string `json:"admin,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// LoadFile reads a cluster.json.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster file: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", path, err)
	}
	if f.Master == "" {
		return nil, fmt.Errorf("cluster file %s: no master address", path)
	}
	return &f, nil
}

// Save writes f to path atomically, readable by the owner only (it holds
// secrets).
func (f *File) Save(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("cluster file: %w", err)
	}
	return os.Rename(tmp, path)
}

// DeveloperOperator is the name of the operator identity willow up and
// deploy/local make for the developer; its token is cluster.json's
// oncall_token.
const DeveloperOperator = "developer"

// WriteOperators writes an identities file (auth.Operators) at path
// holding the developer's identity, role admin, with tok's hash; mode
// 0600.
func WriteOperators(path, tok string) error {
	body := "# Operator identities (package auth): name: {sha256: SHA-256 of the token, roles: [read|oncall|admin]}.\n" +
		"# Written by willow up for the developer; cluster.json's oncall_token is the developer's token.\n" +
		auth.OperatorLine(DeveloperOperator, tok, auth.RoleAdmin)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}
