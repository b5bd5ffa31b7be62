package limits_test

import (
	"strings"
	"testing"
	"time"

	"willow/limits"
)

func TestVideoDuration(t *testing.T) {
	tests := []struct {
		name     string
		l        limits.Limits
		business string
		want     time.Duration
	}{
		{"moments default", limits.Default(), "moments", 60 * time.Second},
		{"other business default", limits.Default(), "comment", limits.DefaultMaxVideoDuration},
		{"override", limits.Limits{MaxVideoDuration: map[string]time.Duration{"moments": 15 * time.Second}}.WithDefaults(), "moments", 15 * time.Second},
		{"default changed", limits.Limits{DefaultVideoDuration: time.Minute}.WithDefaults(), "avatar", time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.VideoDuration(tc.business); got != tc.want {
				t.Fatalf("VideoDuration(%q) = %v, want %v", tc.business, got, tc.want)
			}
		})
	}
}

func TestDefaultsAndValidate(t *testing.T) {
	d := limits.Default()
	if d.MaxPixels != limits.DefaultMaxPixels || d.MaxImageBytes != limits.DefaultMaxImageBytes || d.MaxVideoBytes != limits.DefaultMaxVideoBytes {
		t.Fatalf("defaults: %+v", d)
	}
	if err := (limits.Limits{MaxPixels: -1}).Validate(); err == nil {
		t.Fatal("negative MaxPixels accepted")
	}
	if err := (limits.Limits{MaxVideoDuration: map[string]time.Duration{"momnets": time.Second}}).Validate(); err == nil || !strings.Contains(err.Error(), `"momnets", not a business`) {
		t.Fatalf("a duration for an unknown business: %v", err)
	}
	custom := limits.Limits{MaxPixels: 10}.WithDefaults()
	if custom.MaxPixels != 10 {
		t.Fatalf("WithDefaults overwrote a set value: %+v", custom)
	}
}
