package reconcile

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoopCoalescesPokes(t *testing.T) {
	l := NewLoop()
	passes := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	go l.Run(ctx, time.Hour, func(context.Context) {
		passes <- struct{}{}
		<-release
	})
	<-passes // the first pass, at once
	// A burst of changes while a pass runs is one more pass, not three.
	l.Poke()
	l.Poke()
	l.Poke()
	release <- struct{}{}
	<-passes
	release <- struct{}{}
	select {
	case <-passes:
		t.Fatal("three pokes during one pass made more than one more pass")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	close(release)
}

// A steady stream of events runs passes no closer than the spacing, and
// the last event of the stream still gets its pass.
func TestLoopSpacesPasses(t *testing.T) {
	l := NewLoop()
	l.spacing = 50 * time.Millisecond
	var passes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	go l.Run(ctx, time.Hour, func(context.Context) { passes.Add(1) })
	for end := began.Add(500 * time.Millisecond); time.Now().Before(end); {
		l.Poke()
		time.Sleep(time.Millisecond)
	}
	// However slow the machine, passes cannot come closer than the
	// spacing: the first at once, then at most one per spacing of the
	// time that has passed (read after the count, so never too short).
	n := passes.Load()
	elapsed := time.Since(began)
	if most := int64(elapsed/l.spacing) + 1; n > most {
		t.Errorf("%d passes in %s of events, want at most %d (one per %s)", n, elapsed, most, l.spacing)
	}
	after := passes.Load()
	l.Poke()
	deadline := time.Now().Add(5 * time.Second)
	for passes.Load() == after {
		if time.Now().After(deadline) {
			t.Fatal("a poke after the stream got no pass")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLoopResyncs(t *testing.T) {
	l := NewLoop()
	passes := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx, 10*time.Millisecond, func(context.Context) { passes <- struct{}{} })
	for range 3 {
		select {
		case <-passes:
		case <-time.After(5 * time.Second):
			t.Fatal("no pass without a poke: the resync does not run")
		}
	}
}

func TestRevision(t *testing.T) {
	type tmpl struct {
		Driver string            `json:"driver"`
		Labels map[string]string `json:"labels"`
	}
	a := tmpl{"process", map[string]string{"role": "worker", "zone": "a"}}
	b := tmpl{"process", map[string]string{"zone": "a", "role": "worker"}}
	c := tmpl{"process", map[string]string{"role": "db"}}
	if Revision(a) != Revision(b) {
		t.Errorf("equal templates have revisions %s and %s", Revision(a), Revision(b))
	}
	if Revision(a) == Revision(c) {
		t.Errorf("different templates share revision %s", Revision(a))
	}
	if len(Revision(a)) != 10 {
		t.Errorf("revision %q is not 10 hex digits", Revision(a))
	}
}
