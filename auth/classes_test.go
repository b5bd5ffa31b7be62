package auth_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"willow/auth"
	"willow/compress"
	"willow/edgecache"
	"willow/master"
	willowv1 "willow/proto/willow/v1"
	"willow/timeline"
	"willow/upload"
)

// TestEveryMethodClassified walks every method of every service in the
// willow.v1 proto descriptors and fails when no service table classifies
// it, or when a table names a method the protos do not have.
func TestEveryMethodClassified(t *testing.T) {
	_ = willowv1.File_willow_v1_master_proto // the descriptors register on import
	tables := map[string]auth.Table{
		"upload": upload.Methods(), "master": master.Methods(), "compress": compress.Methods(),
		"edgecache": edgecache.Methods(), "timeline": timeline.Methods(),
	}
	rules := map[string]auth.Rule{}
	for svc, tb := range tables {
		for m, r := range tb {
			if _, dup := rules[m]; dup {
				t.Errorf("%s: %s classified twice", svc, m)
			}
			if r.Classes == 0 {
				t.Errorf("%s: %s accepts no caller class", svc, m)
			}
			if r.Classes&auth.Public != 0 {
				t.Errorf("%s: %s is public; only health and reflection are", svc, m)
			}
			rules[m] = r
		}
	}
	seen := map[string]bool{}
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("willow.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				full := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				n++
				seen[full] = true
				if _, ok := rules[full]; !ok {
					t.Errorf("%s has no caller class: add it to its service's Methods table", full)
				}
			}
		}
		return true
	})
	if n < 20 {
		t.Fatalf("walked only %d methods: are the willow.v1 descriptors registered?", n)
	}
	for m := range rules {
		if !seen[m] {
			t.Errorf("table names %s, which no proto declares", m)
		}
	}
}
