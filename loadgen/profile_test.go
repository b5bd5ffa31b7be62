package loadgen_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"willow/loadgen"
)

func TestBadProfilesNameTheField(t *testing.T) {
	base := "name: p\nphoto_dir: x\n"
	phase := "phases:\n  - {name: a, duration: 10s, upload_rate: 1, download_rate: 1}\n"
	tests := []struct {
		name, yaml, field string
	}{
		{"no name", "photo_dir: x\n" + phase, "name"},
		{"no phases", base, "phases"},
		{"no photo dir", "name: p\n" + phase, "photo_dir"},
		{"negative rate", base + "phases:\n  - {name: a, duration: 10s, upload_rate: -1}\n", "phases[0].upload_rate"},
		{"zero duration", base + "phases:\n  - {name: a, duration: 0s, upload_rate: 1}\n", "phases[0].duration"},
		{"bad duration", base + "phases:\n  - {name: a, duration: soon, upload_rate: 1}\n", "soon"},
		{"video share > 1", base + "phases:\n  - {name: a, duration: 1s, video_share: 2}\n", "phases[0].video_share"},
		{"video without dir", base + "phases:\n  - {name: a, duration: 1s, video_share: 0.5}\n", "video_dir"},
		{"negative weight", base + "phases:\n  - {name: a, duration: 1s, businesses: {moments: -1}}\n", "phases[0].businesses.moments"},
		{"unknown field", base + phase + "bogus: 1\n", "bogus"},
		{"action after end", base + phase + "actions:\n  - {at: \"05:00\", level: red}\n", "actions[0].at"},
		{"empty action", base + phase + "actions:\n  - {at: 1s}\n", "actions[0]"},
		{"bad drill kind", base + phase + "actions:\n  - {at: 1s, drill: {kind: fire, node: n, for: 1s}}\n", "actions[0].drill.kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadgen.ParseProfile([]byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, loadgen.ErrProfile) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestShippedProfilesLoad(t *testing.T) {
	files, _ := filepath.Glob("../profiles/*.yaml")
	if len(files) < 3 {
		t.Fatalf("want at least 3 shipped profiles, found %v", files)
	}
	for _, f := range files {
		p, err := loadgen.LoadProfile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if p.Total() <= 0 {
			t.Errorf("%s: empty", f)
		}
	}
}

func TestSpringFestivalIsNineTimesSteady(t *testing.T) {
	p, err := loadgen.LoadProfile("../profiles/spring-festival.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first, peak := p.Phases[0], p.Phases[0]
	for _, ph := range p.Phases {
		if ph.UploadRate > peak.UploadRate {
			peak = ph
		}
	}
	if peak.UploadRate != 9*first.UploadRate {
		t.Errorf("peak upload rate %v, want 9x %v", peak.UploadRate, first.UploadRate)
	}
	if peak.DownloadRate != first.DownloadRate {
		t.Errorf("peak download rate %v, want 1x %v", peak.DownloadRate, first.DownloadRate)
	}
}

func FuzzParseProfile(f *testing.F) {
	f.Add([]byte("name: p\nphoto_dir: x\nphases:\n  - {name: a, duration: 10s, upload_rate: 1}\n"))
	f.Add([]byte("name: p\nphoto_dir: x\nphases:\n  - {name: a, duration: \"00:40\"}\nactions:\n  - {at: 1s, level: red}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := loadgen.ParseProfile(b)
		if err != nil {
			if !errors.Is(err, loadgen.ErrProfile) {
				t.Fatalf("error %v does not wrap ErrProfile", err)
			}
			return
		}
		// Whatever is accepted is runnable: phases with positive
		// durations and rates in range.
		if p.Total() <= 0 {
			t.Fatalf("accepted a profile with total %v", p.Total())
		}
	})
}
