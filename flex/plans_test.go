package flex_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"willow/flex"
)

func TestShippedPlans(t *testing.T) {
	p := flex.DefaultPlans()
	if got := strings.Join(p.Levels(), ","); got != "normal,blue,yellow,red" {
		t.Fatalf("levels = %s", got)
	}
	want := map[string]map[string]string{
		"normal": {"retries": "on", "image_codec": "heic", "video_bitrate_kbps": "1800", "pool1": "auto", "timeline_delay_ratio": "0"},
		"blue":   {"retries": "on", "image_codec": "jpeg", "image_quality": "50", "video_bitrate_kbps": "1200", "pool1": "auto"},
		"yellow": {"retries": "off", "image_codec": "jpeg", "pool1": "force", "pool2": "force", "timeline_delay_ratio": "0.3", "shed_ratio.prefetch": "0"},
		"red":    {"retries": "off", "pool2": "force", "timeline_delay_ratio": "0.7", "shed_ratio.prefetch": "0.8", "shed_ratio.moments": "0"},
	}
	for lvl, knobs := range want {
		plan, err := p.Plan(lvl)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range knobs {
			if plan[k] != v {
				t.Errorf("%s.%s = %q, want %q", lvl, k, plan[k], v)
			}
		}
		if len(plan) != len(p.KnobNames()) {
			t.Errorf("%s plan has %d knobs, want every one of %d", lvl, len(plan), len(p.KnobNames()))
		}
	}
	normal, _ := p.Plan("normal")
	if normal["image_quality"] != strconv.Itoa(flex.DefaultImageQuality) {
		t.Errorf("normal image_quality %q should come from flex.DefaultImageQuality", normal["image_quality"])
	}
}

func TestValidate(t *testing.T) {
	p := flex.DefaultPlans()
	tests := []struct {
		knob, value string
		err         error
		msg         string // substring of the message
	}{
		{"retries", "off", nil, ""},
		{"retries", "maybe", flex.ErrOutOfRange, "on|off"},
		{"image_codec", "jpeg", nil, ""},
		{"image_codec", "webp", flex.ErrOutOfRange, "heic|jpeg"},
		{"image_quality", "10", nil, ""},
		{"image_quality", "95", nil, ""},
		{"image_quality", "9", flex.ErrOutOfRange, "image_quality=\"9\": allowed an integer in [10,95]"},
		{"image_quality", "96", flex.ErrOutOfRange, "[10,95]"},
		{"image_quality", "high", flex.ErrOutOfRange, "[10,95]"},
		{"video_bitrate_kbps", "300", nil, ""},
		{"video_bitrate_kbps", "1800", nil, ""},
		{"video_bitrate_kbps", "299", flex.ErrOutOfRange, "[300,1800]"},
		{"video_bitrate_kbps", "2500", flex.ErrOutOfRange, "[300,1800]"},
		{"pool1", "force", nil, ""},
		{"pool2", "on", flex.ErrOutOfRange, "off|auto|force"},
		{"timeline_delay_ratio", "1", nil, ""},
		{"timeline_delay_ratio", "1.5", flex.ErrOutOfRange, "timeline_delay_ratio=\"1.5\": allowed a number in [0,1]"},
		{"timeline_delay_ratio", "-0.1", flex.ErrOutOfRange, "[0,1]"},
		{"timeline_delay_ratio", "NaN", flex.ErrOutOfRange, "[0,1]"},
		{"store_write_budget", "0", flex.ErrOutOfRange, "store_write_budget"},
		{"pool1_drain_per_s", "50", nil, ""},
		{"shed_ratio.prefetch", "0.5", nil, ""},
		{"shed_ratio.moments", "2", flex.ErrOutOfRange, "shed_ratio.moments=\"2\": allowed a number in [0,1]"},
		{"shed_ratio.games", "0.5", flex.ErrUnknownBusiness, "avatar|comment|moments|prefetch"},
		{"jpeg_quality", "50", flex.ErrUnknownKnob, "unknown knob \"jpeg_quality\""},
	}
	for _, tt := range tests {
		t.Run(tt.knob+"="+tt.value, func(t *testing.T) {
			err := p.Validate(tt.knob, tt.value)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("message %q does not contain %q", err, tt.msg)
			}
			var ke *flex.KnobError
			if err != nil && (!errors.As(err, &ke) || ke.Knob != tt.knob) {
				t.Fatalf("error %v does not name knob %s", err, tt.knob)
			}
		})
	}
}

func TestLoadPlansRejects(t *testing.T) {
	tests := []struct{ name, yaml, msg string }{
		{"unknown knob", "levels:\n  normal: {}\n  blue:\n    knobs: {jpeg_q: '5'}\n", `level "blue": unknown knob "jpeg_q"`},
		{"unknown business", "levels:\n  normal: {}\n  red:\n    knobs: {shed_ratio.b: '0.5'}\n", "shed_ratio.b: unknown business"},
		{"out of range", "levels:\n  normal: {}\n  red:\n    knobs: {timeline_delay_ratio: '3'}\n", "timeline_delay_ratio"},
		{"bitrate over normal", "levels:\n  normal: {}\n  blue:\n    knobs: {video_bitrate_kbps: '2000'}\n", "[300,1800]"},
		{"missing normal", "levels:\n  blue: {}\n", `level "normal" missing`},
		{"unknown base", "levels:\n  normal: {}\n  blue: {base: green}\n", `"green": unknown base`},
		{"cycle", "levels:\n  normal: {}\n  x: {base: y}\n  y: {base: x}\n", "cycle"},
		{"another business list", "businesses: [a]\nlevels:\n  normal: {}\n", "differ from flex's business table"},
		{"not yaml", "{{", "bad levels file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := flex.LoadPlans([]byte(tt.yaml))
			if !errors.Is(err, flex.ErrBadPlans) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("LoadPlans = %v, want ErrBadPlans containing %q", err, tt.msg)
			}
		})
	}
	// A faster normal bitrate raises the ceiling of the other levels.
	p, err := flex.LoadPlans([]byte("levels:\n  normal:\n    knobs: {video_bitrate_kbps: '2500'}\n  blue:\n    knobs: {video_bitrate_kbps: '2000'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate("video_bitrate_kbps", "2400"); err != nil {
		t.Fatal(err)
	}
}

func TestBusinessTableIsTheOneList(t *testing.T) {
	p := flex.DefaultPlans()
	if got, want := strings.Join(p.Businesses(), ","), strings.Join(flex.BusinessNames(), ","); got != want {
		t.Fatalf("plans' businesses %s, table %s", got, want)
	}
	prio := flex.Priorities()
	for _, b := range flex.Businesses() {
		if err := p.Validate("shed_ratio."+b.Name, "0.5"); err != nil {
			t.Errorf("shed_ratio.%s: %v", b.Name, err)
		}
		if prio[b.Name] != b.Priority || !flex.KnownBusiness(b.Name) {
			t.Errorf("%s: priority %d, known %v", b.Name, prio[b.Name], flex.KnownBusiness(b.Name))
		}
	}
	if !flex.KnownBusiness(flex.DefaultBusiness) || flex.KnownBusiness("games") {
		t.Error("KnownBusiness")
	}
	// A levels file that repeats the table is still accepted.
	if _, err := flex.LoadPlans([]byte("businesses: [prefetch, moments, comment, avatar]\nlevels:\n  normal: {}\n")); err != nil {
		t.Fatal(err)
	}
}

func TestNormalPlanIsTheDefaults(t *testing.T) {
	p := flex.DefaultPlans()
	normal, err := p.Plan(flex.LevelNormal)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range normal {
		if err := p.Validate(name, v); err != nil {
			t.Errorf("default %s=%q: %v", name, v, err)
		}
	}
	st, err := p.Render(flex.Setting{})
	if err != nil {
		t.Fatal(err)
	}
	got, want := flex.Effective(st, "a", ""), flex.Defaults()
	if got.ImageCodec != flex.CodecHEIC || got.Pool1 != flex.PoolAuto || got.Pool2 != want.Pool2 || got.ImageQuality != want.ImageQuality ||
		got.VideoBitrateKbps != want.VideoBitrateKbps || got.StoreWriteBudget != want.StoreWriteBudget || !got.Retries ||
		got.TimelineReleasePerS != want.TimelineReleasePerS || got.Pool1DrainPerS != want.Pool1DrainPerS {
		t.Fatalf("normal rendered %+v, Defaults %+v", got, want)
	}
}

func TestRevert(t *testing.T) {
	l := func(level string, kv ...string) flex.Layer {
		o := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			o[kv[i]] = kv[i+1]
		}
		if len(o) == 0 {
			o = nil
		}
		return flex.Layer{Level: level, Overrides: o}
	}
	before := flex.Setting{Global: l("blue")}
	after := flex.Setting{Global: l("blue", "image_quality", "40"), Scopes: map[string]flex.Layer{"region:a": l("red")}}
	// Someone changed the region:a scope meanwhile and added a knob.
	cur := flex.Setting{Global: l("blue", "image_quality", "40", "retries", "off"), Scopes: map[string]flex.Layer{"region:a": l("yellow")}}
	got := flex.Revert(cur, before, after)
	if got.Global.Level != "blue" || got.Global.Overrides["image_quality"] != "" || got.Global.Overrides["retries"] != "off" {
		t.Errorf("global = %+v", got.Global)
	}
	if got.Scopes["region:a"].Level != "yellow" {
		t.Errorf("scope changed since must be kept: %+v", got.Scopes)
	}
	// Nothing changed since: the revert is exact.
	got = flex.Revert(after, before, after)
	if len(got.Flatten()) != len(before.Flatten()) || got.Global.Level != "blue" || len(got.Scopes) != 0 {
		t.Errorf("exact revert = %+v", got)
	}
}

func TestRenderAndEffective(t *testing.T) {
	p := flex.DefaultPlans()
	st, err := p.Render(flex.Setting{
		Global: flex.Layer{Level: "blue", Overrides: map[string]string{"image_quality": "40"}},
		Scopes: map[string]flex.Layer{"region:a": {Level: "red"}, "group:canary": {Overrides: map[string]string{"retries": "off"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if k := flex.Effective(st, "b", ""); k.Level != "blue" || k.ImageQuality != 40 || !k.Retries {
		t.Errorf("region b: %+v", k)
	}
	if k := flex.Effective(st, "a", ""); k.Level != "red" || k.ImageQuality != 50 || k.Retries || k.ShedRatio["prefetch"] != 0.8 {
		t.Errorf("region a: %+v", k)
	}
	if k := flex.Effective(st, "b", "canary"); k.Level != "blue" || k.Retries {
		t.Errorf("group canary: %+v", k)
	}
	if d := flex.Diff(nil, st); len(d) == 0 {
		t.Error("empty diff")
	}
}
