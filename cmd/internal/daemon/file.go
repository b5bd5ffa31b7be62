package daemon

import (
	"reflect"
	"strings"

	"willow/limits"
)

// Has names the shared sections a service's config file has besides
// node: and its own.
type Has uint8

const (
	// NodeOnly: node: and the service's section (master, timeline).
	NodeOnly Has = 0
	// Store: the store: section (StoreConfig) and its flags.
	Store Has = 1 << iota
	// Limits: the limits: section (limits.Limits), shared by upload and
	// compress so that both check one value.
	Limits
)

// File is a service's config file, as -config is decoded: node:, the
// store: and limits: sections when the service has them (Has), and the
// service's own section S under its role's name (master:, upload:, ...).
// A key of a section the service does not have is refused like any
// unknown key.
type File[S any] struct {
	Node    NodeSection
	Store   StoreConfig
	Limits  limits.Limits
	Service S
}

// doc is the document the file is decoded from and written to: a struct
// of pointers into f, one per section the role has, tagged with the
// section's key; its fields are named for the keys (Node, Store, Limits,
// and the role capitalised: Master, Upload, ...).
func (f *File[S]) doc(role string, has Has) any {
	type section struct {
		key string
		ptr any
	}
	secs := []section{{"node", &f.Node}}
	if has&Store != 0 {
		secs = append(secs, section{"store", &f.Store})
	}
	if has&Limits != 0 {
		secs = append(secs, section{"limits", &f.Limits})
	}
	secs = append(secs, section{role, &f.Service})
	fields := make([]reflect.StructField, len(secs))
	for i, s := range secs {
		fields[i] = reflect.StructField{Name: strings.ToUpper(s.key[:1]) + s.key[1:], Type: reflect.TypeOf(s.ptr), Tag: reflect.StructTag(`yaml:"` + s.key + `"`)}
	}
	doc := reflect.New(reflect.StructOf(fields)).Elem()
	for i, s := range secs {
		doc.Field(i).Set(reflect.ValueOf(s.ptr))
	}
	return doc.Addr().Interface()
}

// WithRedis is a service's section for a service on Redis: its Config
// inlined plus redis, the URL (Daemon.Redis; default $WILLOW_REDIS).
type WithRedis[C any] struct {
	Config C      `yaml:",inline"`
	Redis  string `yaml:"redis"`
}
