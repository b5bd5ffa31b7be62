// Package cpustat reads the process's CPU time (user plus system) from
// getrusage(2).
package cpustat

import (
	"syscall"
	"time"
)

// Process is the CPU time the process has used; 0 if it cannot be read.
func Process() time.Duration {
	d, _ := usage(syscall.RUSAGE_SELF)
	return d
}

func usage(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
