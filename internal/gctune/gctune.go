// Package gctune sets the server's garbage-collector target from its load.
//
// Most of the server's heap is per connected agent (its connection, its
// watch, its objects in the caches), and the collector lets the heap grow
// GOGC percent past what is live before it collects. A registration storm
// wants a high target (every collection is CPU taken from joins); an idle
// fleet wants a low one (the headroom is resident memory, per agent,
// spent on nothing). One fixed GOGC buys one at the cost of the other, so
// the Tuner picks the busy target while the process uses CPU and the idle
// target once it has been quiet for a while, and hands the memory freed
// then back to the kernel.
package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Defaults: what a 5,000-agent fleet measured (docs/performance.md).
const (
	// BusyPercent is the target while the server works: 75 cost no
	// storm rate against Go's 100 and saved a tenth of the idle RSS.
	BusyPercent = 75
	// IdlePercent is the target of a quiet server: the heap may grow a
	// quarter past the live heap. With idle allocation (heartbeats) of a
	// few MB/s, that is a collection every several seconds, each a
	// fraction of a core for a fraction of a second.
	IdlePercent = 25
	// Interval is how often the load is sampled.
	Interval = 5 * time.Second
	// QuietFor is how many quiet samples in a row make the server idle:
	// a pause between two bursts of joins is not idleness.
	QuietFor = 3
	// QuietShare is the share of the CPUs under which a sample is quiet,
	// and BusyShare the share at or over which the server is busy again
	// at once. The gap keeps a fleet that idles near one of them (its
	// heartbeats, and the collections the idle target adds) from
	// switching back and forth.
	QuietShare = 0.20
	BusyShare  = 0.30
)

// Tuner switches the collector's target between busy and idle.
type Tuner struct {
	Busy, Idle int
	// Quiet and Loud are in cores: a sample below Quiet is quiet, one at
	// or above Loud makes the server busy.
	Quiet, Loud float64
	QuietFor    int
	Interval    time.Duration

	idle  bool
	quiet int
	// set sets the target and free returns freed heap to the kernel
	// (debug.SetGCPercent, debug.FreeOSMemory; tests record instead).
	set  func(percent int)
	free func()
}

// New returns a tuner with the defaults, its thresholds scaled to the
// CPUs the process may use.
func New() *Tuner {
	cpus := float64(runtime.GOMAXPROCS(0))
	return &Tuner{Busy: BusyPercent, Idle: IdlePercent, Quiet: QuietShare * cpus, Loud: BusyShare * cpus, QuietFor: QuietFor, Interval: Interval}
}

// Step takes one sample (the cores the process used since the last one)
// and returns the target to set, and whether it changed.
func (t *Tuner) Step(cores float64) (percent int, changed bool) {
	switch {
	case cores >= t.Loud:
		t.quiet = 0
		if t.idle {
			t.idle = false
			return t.Busy, true
		}
	case cores < t.Quiet:
		t.quiet++
		if !t.idle && t.quiet >= t.QuietFor {
			t.idle = true
			return t.Idle, true
		}
	default:
		// Between the two: whatever it was, and no longer quiet.
		t.quiet = 0
	}
	if t.idle {
		return t.Idle, false
	}
	return t.Busy, false
}

// Run sets the busy target, then samples the process's CPU time every
// Interval and sets the target Step chooses, until ctx ends.
func (t *Tuner) Run(ctx context.Context) {
	set, free := t.set, t.free
	if set == nil {
		set = func(percent int) { debug.SetGCPercent(percent) }
	}
	if free == nil {
		free = debug.FreeOSMemory
	}
	set(t.Busy)
	tick := time.NewTicker(t.Interval)
	defer tick.Stop()
	last, at := cpuTime(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, when := cpuTime(), time.Now()
		cores := (now - last).Seconds() / when.Sub(at).Seconds()
		last, at = now, when
		percent, changed := t.Step(cores)
		if !changed {
			continue
		}
		set(percent)
		if percent == t.Idle {
			// The heap the busy target let grow is garbage now: collect
			// it and return the pages, rather than wait for the
			// scavenger to trickle them back over minutes.
			free()
		}
		klog.V(2).InfoS("Garbage collector target set", "GOGC", percent, "cores", cores)
	}
}

// cpuTime is the user and system CPU the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
