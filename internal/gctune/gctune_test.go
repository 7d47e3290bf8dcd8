package gctune

import (
	"context"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	type sample struct {
		cores   float64
		percent int
		changed bool
	}
	// Quiet below 0.4 cores, busy at 0.6 and over, idle after 3 quiet samples.
	cases := []struct {
		name    string
		samples []sample
	}{
		{"busy stays busy", []sample{{1.5, 75, false}, {0.9, 75, false}}},
		{"three quiet samples make it idle", []sample{{0.1, 75, false}, {0.1, 75, false}, {0.1, 25, true}, {0.1, 25, false}}},
		{"a pause between bursts is not idleness", []sample{{0.1, 75, false}, {0.1, 75, false}, {1.2, 75, false}, {0.1, 75, false}, {0.1, 75, false}}},
		{"between the thresholds resets the count", []sample{{0.1, 75, false}, {0.1, 75, false}, {0.5, 75, false}, {0.1, 75, false}, {0.1, 75, false}, {0.1, 25, true}}},
		{"idle goes busy at the first loud sample", []sample{{0, 75, false}, {0, 75, false}, {0, 25, true}, {0.7, 75, true}, {0.7, 75, false}}},
		{"an idle fleet near the quiet line stays idle", []sample{{0.1, 75, false}, {0.1, 75, false}, {0.1, 25, true}, {0.45, 25, false}, {0.55, 25, false}, {0.3, 25, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tu := &Tuner{Busy: 75, Idle: 25, Quiet: 0.4, Loud: 0.6, QuietFor: 3, Interval: time.Second}
			for i, s := range c.samples {
				percent, changed := tu.Step(s.cores)
				if percent != s.percent || changed != s.changed {
					t.Fatalf("sample %d (%.2f cores): got GOGC %d changed %v, want %d changed %v", i, s.cores, percent, changed, s.percent, s.changed)
				}
			}
		})
	}
}

func TestNewScalesToCPUs(t *testing.T) {
	tu := New()
	if tu.Quiet <= 0 || tu.Loud <= tu.Quiet {
		t.Fatalf("thresholds quiet %.2f, loud %.2f cores: want 0 < quiet < loud", tu.Quiet, tu.Loud)
	}
}

// Run sets the busy target at once, then the idle one once the process
// has been quiet for QuietFor samples.
func TestRunSetsTargets(t *testing.T) {
	got := make(chan int, 10)
	tu := &Tuner{Busy: 75, Idle: 25, Quiet: 1e9, Loud: 2e9, QuietFor: 2, Interval: 10 * time.Millisecond,
		set: func(p int) { got <- p }, free: func() {}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tu.Run(ctx)
	for _, want := range []int{75, 25} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("GOGC set to %d, want %d", p, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GOGC not set to %d within 10 s", want)
		}
	}
}
