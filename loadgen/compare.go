package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Comparison is the same profile run with flex off and with flex on.
type Comparison struct {
	Off *Report `json:"flex_off"`
	On  *Report `json:"flex_on"`
	// OffLabel and OnLabel name the runs in report.md; default "flex off"
	// and "flex on" (willow load run --auto-flex --compare: scripted and
	// auto-flex).
	OffLabel string `json:"off_label,omitempty"`
	OnLabel  string `json:"on_label,omitempty"`
}

// WriteComparison writes report.json (both runs), report.md (side by
// side: goodput, p99, rejected, lost), compare.svg (goodput and upload
// p99 of both runs side by side) and each run's charts, prefixed
// flex-off- and flex-on-, into dir.
func WriteComparison(dir string, c Comparison) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	offCharts, err := c.Off.writeCharts(dir, "flex-off-")
	if err != nil {
		return err
	}
	onCharts, err := c.On.writeCharts(dir, "flex-on-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "compare.svg"), []byte(compareChart(c)), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	offLabel, onLabel := c.OffLabel, c.OnLabel
	if offLabel == "" {
		offLabel = "flex off"
	}
	if onLabel == "" {
		onLabel = "flex on"
	}
	fmt.Fprintf(&md, "# Load comparison: %s, %s against %s\n\n", c.On.Profile, offLabel, onLabel)
	fmt.Fprintf(&md, "| | %s | %s |\n|---|---|---|\n", offLabel, onLabel)
	row := func(name string, f func(*Report) string) {
		fmt.Fprintf(&md, "| %s | %s | %s |\n", name, f(c.Off), f(c.On))
	}
	row("goodput (ok/s)", func(r *Report) string { return fmt.Sprintf("%.1f", r.Totals.GoodputPerS) })
	row("uploads ok", func(r *Report) string { return fmt.Sprint(r.Totals.Upload.Succeeded) })
	row("downloads ok", func(r *Report) string { return fmt.Sprint(r.Totals.Download.Succeeded) })
	row("downloads of variants not ready yet", func(r *Report) string { return fmt.Sprint(r.Totals.Download.NotReady) })
	row("upload p99 ms", func(r *Report) string { return fmt.Sprintf("%.0f", r.Totals.Upload.P99Ms) })
	row("download p99 ms", func(r *Report) string { return fmt.Sprintf("%.0f", r.Totals.Download.P99Ms) })
	row("uploads acknowledged processing (no variants yet)", func(r *Report) string { return fmt.Sprint(r.Variants.Processing) })
	row("variant-ready p50 / p99 / max ms (ack to a variant downloadable)", func(r *Report) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f", r.Variants.P50Ms, r.Variants.P99Ms, r.Variants.MaxMs)
	})
	row("variants not ready at the end", func(r *Report) string { return fmt.Sprint(r.Variants.NotReady) })
	row("rejected", func(r *Report) string {
		return fmt.Sprint(r.Totals.Upload.Rejected + r.Totals.Download.Rejected)
	})
	row("failed", func(r *Report) string { return fmt.Sprint(r.Totals.Upload.Failed + r.Totals.Download.Failed) })
	row("dropped by generator", func(r *Report) string {
		return fmt.Sprint(r.Totals.Upload.Dropped + r.Totals.Download.Dropped)
	})
	row("lost", func(r *Report) string { return fmt.Sprint(r.Totals.Lost) })
	row("pending in pool 1", func(r *Report) string { return fmt.Sprint(r.Totals.Pending) })
	fmt.Fprintln(&md, "\n## Charts\n\nGoodput and upload p99 of both runs:\n\n![compare.svg](compare.svg)")
	for i := range offCharts {
		fmt.Fprintf(&md, "\n![%s](%s) ![%s](%s)\n", offCharts[i], offCharts[i], onCharts[i], onCharts[i])
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644)
}
