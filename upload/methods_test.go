package upload_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/upload"
)

// TestShedClassesAreWhatTheShedderUses: the classes the upload front
// declares next to its code (upload.ShedClasses) are the ones its node's
// shedder applies, for every method of the Upload service, and they act:
// with every user of the business shed, Begin still reaches its handler
// (Deferred: the front rejects it itself, counted as deferred), while the
// rest of an upload admitted before (Chunks, Status, Commit) passes.
func TestShedClassesAreWhatTheShedderUses(t *testing.T) {
	f := newFront(t, frontOpts{shed: &shedding.Config{}})
	sh := f.node.Shedder()
	declared := upload.ShedClasses()
	var methods []string
	for _, m := range willowv1.Upload_ServiceDesc.Methods {
		methods = append(methods, "/"+willowv1.Upload_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for _, s := range willowv1.Upload_ServiceDesc.Streams {
		methods = append(methods, "/"+willowv1.Upload_ServiceDesc.ServiceName+"/"+s.StreamName)
	}
	for _, m := range methods {
		if got, want := sh.Class(m), declared[m]; got != want {
			t.Errorf("%s: shedder applies %v, upload declares %v", m, got, want)
		}
	}
	for m := range declared {
		if sh.Class(m) != declared[m] {
			t.Errorf("%s declared %v, shedder applies %v", m, declared[m], sh.Class(m))
		}
	}
	if sh.Class(willowv1.Upload_Begin_FullMethodName) != shedding.Deferred || sh.Class(willowv1.Upload_Chunks_FullMethodName) != shedding.Exempt {
		t.Fatalf("Begin %v, Chunks %v: want deferred, exempt", sh.Class(willowv1.Upload_Begin_FullMethodName), sh.Class(willowv1.Upload_Chunks_FullMethodName))
	}

	ctx := shedding.WithRequest(ctxT(t), "moments", "alice")
	data := photo(t)
	b, err := f.begin(ctx, "admitted-1", "alice", data)
	if err != nil {
		t.Fatal(err)
	}
	f.knobs(map[string]string{"shed_ratio.moments": "1"})
	deferred := func() float64 {
		mfs, err := f.node.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == "willow_shedding_deferred_total" {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	eventually(t, "Begin shed by its handler", func() bool {
		_, err := f.begin(ctx, "shed-1", "alice", data)
		return err != nil && deferred() > 0
	})
	_, err = f.begin(ctx, "shed-2", "alice", data)
	wantReason(t, err, codes.ResourceExhausted, shedding.ReasonShedRatio)

	if _, err := f.send(ctx, "admitted-1", data, b.GetOffset(), 256<<10); err != nil {
		t.Fatalf("Chunks of an admitted upload while its business is shed: %v", err)
	}
	if _, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "admitted-1", User: "alice"}); err != nil {
		t.Fatalf("Status of an admitted upload while its business is shed: %v", err)
	}
	if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "admitted-1", User: "alice"}); err != nil {
		t.Fatalf("Commit of an admitted upload while its business is shed: %v", err)
	}
}
