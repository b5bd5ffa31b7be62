package daemon

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Flag is a command-line flag that sets one key of a config file
// section, so that a flag and the key it overrides are declared together
// and the flag's type is the key's: a string, bool, int, int64,
// time.Duration, or a []string given comma-separated.
type Flag struct {
	// Name is the flag, without the dash.
	Name string
	// Key is the yaml key of the section the flag sets, dotted into a
	// nested section ("http.addr"); empty: Name with "_" for "-".
	Key   string
	Usage string
}

// RedisUsage is the usage of -redis for a service that needs Redis.
const RedisUsage = "Redis URL: redis://host:port/db, or redis-cluster://h1:port,h2:port,... for a Redis Cluster (default $WILLOW_REDIS)"

// bind registers flags on FS, each bound to its key in the section name
// (a pointer to a struct with yaml tags). A key the section lacks, or of
// a type a flag cannot hold, is an error naming the flag.
func (d *Daemon) bind(name string, flags []Flag, section any) error {
	for _, f := range flags {
		key := f.Key
		if key == "" {
			key = strings.ReplaceAll(f.Name, "-", "_")
		}
		v, ok := fieldByKey(reflect.ValueOf(section).Elem(), key)
		if !ok {
			return fmt.Errorf("flag -%s: the %s: section has no key %s", f.Name, name, key)
		}
		switch p := v.Addr().Interface().(type) {
		case *string:
			d.FS.StringVar(p, f.Name, *p, f.Usage)
		case *bool:
			d.FS.BoolVar(p, f.Name, *p, f.Usage)
		case *int:
			d.FS.IntVar(p, f.Name, *p, f.Usage)
		case *int64:
			d.FS.Int64Var(p, f.Name, *p, f.Usage)
		case *time.Duration:
			d.FS.DurationVar(p, f.Name, *p, f.Usage)
		case *[]string:
			d.FS.Func(f.Name, f.Usage, func(s string) error { *p = strings.Split(s, ","); return nil })
		default:
			return fmt.Errorf("flag -%s: key %s is a %s, which a flag cannot set", f.Name, key, v.Type())
		}
	}
	return nil
}

// fieldByKey finds the field of the struct v that the dotted yaml key
// names, looking through inlined fields.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	head, rest, nested := strings.Cut(key, ".")
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		switch {
		case !sf.IsExported():
		case opts == "inline":
			if fv, ok := fieldByKey(v.Field(i), key); ok {
				return fv, true
			}
		case name == head && nested:
			if v.Field(i).Kind() == reflect.Struct {
				return fieldByKey(v.Field(i), rest)
			}
		case name == head:
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
