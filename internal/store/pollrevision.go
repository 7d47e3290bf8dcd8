package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/k3s-io/kine/pkg/server"
)

// polledRevision is kine's backend with CurrentRevision answered by the
// revision kine's poll loop has last delivered to watches.
//
// kine (v0.17.5) answers a watch progress request with the revision it
// keeps in memory, which its poll loop advances only with a
// compare-and-swap against the poll's own previous revision, while this
// server's writes and its first read set it too. Once the two disagree,
// which takes one write by another server between this server's first read
// and its first watch, only this server's own writes move that revision:
// a server that writes nothing keeps reporting the revision it started at.
// A consistent list, served from the watch cache, asks the datastore's
// current revision (the database's, always right) and waits for the cache
// to reach it; a cache of objects nobody writes reaches it only by a
// progress notification, which then never comes. A server restarted beside
// busy ones thus never listed its join tokens and never became ready
// (TestHAAgentFailover, under load).
//
// The revision the poll loop delivers is the one every watch's own
// position is measured in, so kine's progress notifications, which it
// sends only to watches that have reached the current revision, come again
// once they have.
type polledRevision struct {
	server.Backend
	// delivered is the revision of the newest batch the poll loop
	// delivered; 0 until the first.
	delivered atomic.Int64
}

// followPolls wraps b and follows its poll loop until ctx ends.
func followPolls(ctx context.Context, b server.Backend) *polledRevision {
	p := &polledRevision{Backend: b}
	go p.follow(ctx)
	return p
}

// CurrentRevision is the poll loop's delivered revision; before its first
// delivery, kine's own answer.
func (p *polledRevision) CurrentRevision(ctx context.Context) (int64, error) {
	if rev := p.delivered.Load(); rev > 0 {
		return rev, nil
	}
	return p.Backend.CurrentRevision(ctx)
}

// follow watches everything from now on, as one more subscriber of kine's
// poll loop, and keeps the revision of each batch. kine drops a subscriber
// that falls behind; this one only stores a number, but is subscribed
// again if it ever is.
func (p *polledRevision) follow(ctx context.Context) {
	for ctx.Err() == nil {
		wr := p.Backend.Watch(ctx, 0)
		// The first batch is the watch's starting point, kine's in-memory
		// revision: not a delivery.
		<-wr.Eventc
		for batch := range wr.Eventc {
			// Only this goroutine writes; a new subscription never
			// starts below the last one's batches.
			if batch.CurrentRev > p.delivered.Load() {
				p.delivered.Store(batch.CurrentRev)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
