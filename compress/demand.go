package compress

import (
	"math"
	"sync"
	"time"
)

// demandTau is the time constant of the demand's moving average.
const demandTau = 10 * time.Second

// demand measures how much work the node is asked for against its
// workers: the tasks in work or waiting, integrated over time, per worker,
// as a moving average over about demandTau (heartbeat Load.compress_demand,
// auto-flex's compress_demand signal). 1 means every worker busy and none
// waiting; above 1 tasks queue on average. Unlike the queue p99, a single
// slow task does not move it, and a busy but stable queue (workers at 70%,
// waits of a few task times) stays near or under 1; a node that cannot keep
// up climbs without bound.
type demand struct {
	now     func() time.Time
	workers int
	mu      sync.Mutex // guards the fields below
	n       int        // tasks in work or waiting
	area    float64    // task-seconds since the last read
	at      time.Time  // last change of n
	read    time.Time  // last read
	avg     float64
}

func newDemand(now func() time.Time, workers int) *demand {
	t := now()
	return &demand{now: now, workers: max(workers, 1), at: t, read: t}
}

func (d *demand) advance(now time.Time) {
	if now.After(d.at) {
		d.area += float64(d.n) * now.Sub(d.at).Seconds()
		d.at = now
	}
}

// add counts k tasks entering (k > 0) or leaving (k < 0).
func (d *demand) add(k int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advance(d.now())
	d.n += k
}

// value folds the time since the last call into the moving average and
// returns it.
func (d *demand) value() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	d.advance(now)
	dt := now.Sub(d.read).Seconds()
	if dt <= 0 {
		return d.avg
	}
	inst := d.area / dt / float64(d.workers)
	d.avg += (1 - math.Exp(-dt/demandTau.Seconds())) * (inst - d.avg)
	d.area, d.read = 0, now
	return d.avg
}
