// Package loadgen replays load profiles against a Willow cluster and writes
// capacity reports.
//
// A profile (YAML) is a list of phases — duration, upload and download
// rates, photo sizes drawn from a directory of real photos, video share,
// business mix, user population, Zipf popularity of downloads — plus flex
// actions at given times. Load is open-loop: arrivals follow a Poisson
// process at the phase's rate and never wait for earlier answers, so
// overload is real; the only bound is MaxOutstanding, and arrivals over it
// are counted as "dropped by the generator", never silently skipped.
//
// A run records per second: offered, admitted and succeeded rates per kind
// by arrival, completions and a rolling p50/p99 by completion time,
// rejections by reason and business, the flex level and
// knob changes, buffer pool sizes and held notifications. At the end every
// acknowledged upload is checked to be downloadable with its SHA-256: the
// count that is not is "lost" (it must be zero). The report is report.json,
// report.md and SVG charts.
//
// The code is in three parts: the workload model (workload.go), observation
// (observe.go, progress.go) and verification (verify.go); runner.go wires
// them and owns cancellation.
package loadgen
