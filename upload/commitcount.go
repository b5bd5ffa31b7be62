package upload

import (
	"time"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// commitCounts counts finished commits, and the uploads begun (staged
// new: the arrivals). A client's mistake (bad size, checksum, unknown
// upload) is neither a success nor a failure of the front, as in the
// node's own success rate (node.ServerFault).
type commitCounts struct {
	ok, failed, begun node.RateCounter
}

func (c *commitCounts) count(err error) {
	switch {
	case err == nil:
		c.ok.Add(1)
	case node.ServerFault(err):
		c.failed.Add(1)
	}
}

func (c *commitCounts) fill(l *willowv1.Load, now time.Time) {
	if l.Gauges == nil {
		l.Gauges = map[string]float64{}
	}
	l.Gauges[node.GaugeUploadsPerS] = c.ok.Rate(now)
	l.Gauges[node.GaugeUploadFailuresPerS] = c.failed.Rate(now)
	l.Gauges[node.GaugeUploadsBegunPerS] = c.begun.Rate(now)
}
