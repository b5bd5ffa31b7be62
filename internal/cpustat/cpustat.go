// Package cpustat reads CPU time from getrusage(2): the whole process's
// and the calling thread's (user plus system).
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

// Thread is the CPU time the calling OS thread has used (lock the
// goroutine to its thread around a measurement); ok is false if it
// cannot be read.
func Thread() (d time.Duration, ok bool) { return usage(syscall.RUSAGE_THREAD) }

func usage(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
