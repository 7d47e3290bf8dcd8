// Package ratelimit holds token buckets per caller (a join token, a
// machine, a client address) for the loops an outsider can drive, with
// the table itself bounded so that many callers cannot grow it without
// limit.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// idleAfter is how long a bucket goes unused before it may be forgotten:
// by then it has refilled for any rate used here, so forgetting it gives
// nothing away.
const idleAfter = time.Minute

// Keyed is a table of token buckets, one per key, at most Max of them.
type Keyed struct {
	Max int
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	*rate.Limiter
	used time.Time
}

// NewKeyed returns a table of at most max buckets.
func NewKeyed(max int) *Keyed {
	return &Keyed{Max: max, Now: time.Now, buckets: map[string]*bucket{}}
}

// Take spends one token of key's bucket (made at rate r with burst on
// first use) and returns zero if the caller may go on, or how long it
// should wait before trying again. A refused call spends nothing.
func (k *Keyed) Take(key string, r rate.Limit, burst int) time.Duration {
	now := k.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.buckets[key]
	if b == nil {
		if len(k.buckets) >= k.Max {
			k.forget(now)
		}
		b = &bucket{Limiter: rate.NewLimiter(r, burst)}
		k.buckets[key] = b
	}
	b.used = now
	res := b.ReserveN(now, 1)
	if !res.OK() {
		return idleAfter // burst 0: never
	}
	delay := res.DelayFrom(now)
	if delay > 0 {
		res.CancelAt(now)
	}
	return delay
}

// forget drops idle buckets; if none is idle (a flood of new keys), it
// drops the least recently used, so the table never passes Max. A caller
// whose bucket is dropped that way starts again with a full burst, which
// the per-key limit's callers (tokens, machines, addresses) bound anyway.
func (k *Keyed) forget(now time.Time) {
	oldest, oldestKey := now, ""
	for key, b := range k.buckets {
		if now.Sub(b.used) > idleAfter {
			delete(k.buckets, key)
			continue
		}
		if b.used.Before(oldest) || oldestKey == "" {
			oldest, oldestKey = b.used, key
		}
	}
	if len(k.buckets) >= k.Max && oldestKey != "" {
		delete(k.buckets, oldestKey)
	}
}

// Len is how many buckets the table holds.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}
