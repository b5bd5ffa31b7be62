package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"willow/loadgen"
	"willow/master"
	willowv1 "willow/proto/willow/v1"
)

// autoFlexStep is one level step auto-flex took during a run.
type autoFlexStep struct {
	AtS    float64 `json:"at_s"` // seconds since the run started
	Level  string  `json:"level"`
	Reason string  `json:"reason"`
}

// startAutoFlex switches auto-flex on for a run (from normal, so every
// step is its own) and returns the function that, after the run, lists the
// steps auto-flex took and puts the mode back.
func startAutoFlex(ctx context.Context, mc willowv1.MasterClient) (func() ([]autoFlexStep, error), error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	before, err := mc.GetFlexAuto(cctx, &willowv1.GetFlexAutoRequest{})
	if err != nil {
		return nil, fmt.Errorf("auto-flex: %w", err)
	}
	if _, err := mc.SetFlexAuto(cctx, &willowv1.SetFlexAutoRequest{Mode: master.AutoOn, Reason: "willow load run --auto-flex"}); err != nil {
		return nil, fmt.Errorf("auto-flex on: %w", err)
	}
	start := time.Now()
	return func() ([]autoFlexStep, error) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := mc.FlexHistory(cctx, &willowv1.FlexHistoryRequest{Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("auto-flex steps: %w", err)
		}
		var steps []autoFlexStep
		for _, e := range h.GetEntries() { // newest first
			if e.GetActor() != master.AutoFlexActor || e.GetAction() != "set" || !e.GetAccepted() || e.GetAtUnixMs() < start.UnixMilli() {
				continue
			}
			lvl := e.GetTo()
			if f := strings.Fields(lvl); len(f) > 1 {
				lvl = f[1] // "v7 yellow ..." -> yellow
			}
			steps = append([]autoFlexStep{{AtS: float64(e.GetAtUnixMs()-start.UnixMilli()) / 1000, Level: lvl, Reason: e.GetReason()}}, steps...)
		}
		if before.GetMode() != master.AutoOn {
			if _, err := mc.SetFlexAuto(cctx, &willowv1.SetFlexAutoRequest{Mode: before.GetMode(), Reason: "willow load run --auto-flex done"}); err != nil {
				return steps, fmt.Errorf("auto-flex back to %s: %w", before.GetMode(), err)
			}
		}
		return steps, nil
	}, nil
}

// scriptedProfile loads the scripted profile of an --auto-flex --compare
// run: --scripted, else PROFILE with "-unscripted" dropped from its name.
func scriptedProfile(unscripted, scripted string, scale float64) (*loadgen.Profile, error) {
	if scripted == "" {
		scripted = strings.Replace(unscripted, "-unscripted", "", 1)
		if scripted == unscripted {
			return nil, usagef("--auto-flex --compare needs --scripted PROFILE (PROFILE's name has no -unscripted to drop)")
		}
	}
	p, err := loadgen.LoadProfile(scripted)
	if err != nil {
		return nil, err
	}
	return p.Scaled(scale), nil
}

func levelsOf(steps []autoFlexStep) []string {
	l := []string{}
	for _, s := range steps {
		l = append(l, s.Level)
	}
	return l
}

// writeAutoResult writes an --auto-flex run's report and its final JSON
// line: goodput_per_s, lost and the level steps taken.
func writeAutoResult(w io.Writer, dir string, rep *loadgen.Report, steps []autoFlexStep) error {
	if err := rep.Write(dir); err != nil {
		return err
	}
	if steps == nil {
		steps = []autoFlexStep{}
	}
	b, err := json.Marshal(struct {
		Report      string         `json:"report"`
		GoodputPerS float64        `json:"goodput_per_s"`
		UploadsOK   int64          `json:"uploads_ok"`
		UploadP99Ms float64        `json:"upload_p99_ms"`
		Lost        int64          `json:"lost"`
		VariantP99  float64        `json:"variant_ready_p99_ms"`
		NotReady    int64          `json:"variants_not_ready"`
		Levels      []string       `json:"levels"`
		Steps       []autoFlexStep `json:"auto_flex_steps"`
	}{filepath.Join(dir, "report.md"), round2(rep.Totals.GoodputPerS), int64(rep.Totals.Upload.Succeeded),
		round2(rep.Totals.Upload.P99Ms), int64(rep.Totals.Lost), round2(rep.Variants.P99Ms), int64(rep.Variants.NotReady),
		levelsOf(steps), steps})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, unescapeJSON(b))
	return lostError(rep)
}

// writeAutoComparison writes the scripted run against the unscripted one
// with auto-flex, and the final JSON line with both and the ratios the
// rehearsal goal names (goodput >= 95% of scripted, upload p99 <= 1.5x).
func writeAutoComparison(w io.Writer, dir string, scripted, auto *loadgen.Report, steps []autoFlexStep) error {
	if err := loadgen.WriteComparison(dir, loadgen.Comparison{Off: scripted, On: auto,
		OffLabel: "scripted (" + scripted.Profile + ")", OnLabel: "auto-flex (" + auto.Profile + ")"}); err != nil {
		return err
	}
	if steps == nil {
		steps = []autoFlexStep{}
	}
	type run struct {
		GoodputPerS float64 `json:"goodput_per_s"`
		UploadP99Ms float64 `json:"upload_p99_ms"`
		Lost        int64   `json:"lost"`
		// VariantP99 is ack to a variant downloadable (loadgen
		// VariantStats); NotReady the uploads with none at the end.
		VariantP99 float64 `json:"variant_ready_p99_ms"`
		NotReady   int64   `json:"variants_not_ready"`
	}
	runOf := func(r *loadgen.Report) run {
		return run{round2(r.Totals.GoodputPerS), round2(r.Totals.Upload.P99Ms), int64(r.Totals.Lost),
			round2(r.Variants.P99Ms), int64(r.Variants.NotReady)}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return round2(a / b)
	}
	b, err := json.Marshal(struct {
		Report       string         `json:"report"`
		Scripted     run            `json:"scripted"`
		AutoFlex     run            `json:"auto_flex"`
		GoodputRatio float64        `json:"goodput_ratio"`
		P99Ratio     float64        `json:"upload_p99_ratio"`
		Levels       []string       `json:"levels"`
		Steps        []autoFlexStep `json:"auto_flex_steps"`
	}{filepath.Join(dir, "report.md"),
		runOf(scripted), runOf(auto),
		ratio(auto.Totals.GoodputPerS, scripted.Totals.GoodputPerS), ratio(auto.Totals.Upload.P99Ms, scripted.Totals.Upload.P99Ms),
		levelsOf(steps), steps})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, unescapeJSON(b))
	return lostError(scripted, auto)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// unescapeJSON undoes json.Marshal's HTML escaping of <, > and & (reasons
// read "p99 1.8 s > 1 s").
func unescapeJSON(b []byte) string {
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b))
}
