package reconcile

import (
	"context"
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
