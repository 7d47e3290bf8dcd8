// Package reconcile is the shape the leader's fleet controllers (machine
// pools, plan sets) share: one goroutine that reconciles everything it
// owns whenever an informer reports a change, and on a timer besides, so
// that what no event announces (a host that died, a deadline that
// passed) is noticed too; and the revision of a template, the content
// hash that tells a controller's old children from its current ones.
package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Loop runs one reconcile function: changes coalesce into one pending run,
// so a burst of events costs one pass, not one per event.
type Loop struct {
	kick chan struct{}
}

// NewLoop returns a loop with nothing pending.
func NewLoop() *Loop { return &Loop{kick: make(chan struct{}, 1)} }

// Poke asks for a pass; it never blocks.
func (l *Loop) Poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Handler pokes the loop on every add, update and delete of an informer.
func (l *Loop) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { l.Poke() },
		UpdateFunc: func(any, any) { l.Poke() },
		DeleteFunc: func(any) { l.Poke() },
	}
}

// Run calls pass at once, then after every poke and every resync, until
// ctx ends.
func (l *Loop) Run(ctx context.Context, resync time.Duration, pass func(context.Context)) {
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-t.C:
		}
	}
}

// Revision is the content hash of a template (any JSON-encodable spec):
// equal templates have equal revisions, and a child records the revision
// it was made from.
func Revision(template any) string {
	b, _ := json.Marshal(template)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:10]
}
