package ratelimit

import (
	"net"
	"net/http"
	"sync"
)

// Slots bounds work that lasts (a download): at most PerKey at once for
// one key (a client address, a user), at most Total for all keys
// together. Unlike a token bucket it counts what is in progress, so a
// client that holds its work open — reading a download a few bytes at a
// time — holds only its own slots, never everyone's. The table holds a
// key only while it has work in progress, so it is bounded by Total.
type Slots struct {
	PerKey, Total int

	mu   sync.Mutex
	held map[string]int
	all  int
}

// NewSlots returns slots for at most perKey at once per key and total in all.
func NewSlots(perKey, total int) *Slots {
	return &Slots{PerKey: perKey, Total: total, held: map[string]int{}}
}

// Refusal says which limit refused a Take.
type Refusal int

const (
	// Taken: not refused.
	Taken Refusal = iota
	// KeyFull: the key holds PerKey already.
	KeyFull
	// AllFull: all keys together hold Total already.
	AllFull
)

// Take takes one of key's slots; release gives it back (call it once).
// When none is free, release is nil and why says which limit refused.
func (s *Slots) Take(key string) (release func(), why Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.held[key] >= s.PerKey:
		return nil, KeyFull
	case s.all >= s.Total:
		return nil, AllFull
	}
	s.held[key]++
	s.all++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.all--
			if s.held[key]--; s.held[key] <= 0 {
				delete(s.held, key)
			}
		})
	}, Taken
}

// InUse is how many slots are held, in all.
func (s *Slots) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

// Address is the client address a request's limits are kept by: the
// connection's peer IP. Headers such as X-Forwarded-For are the client's
// to forge, so they are not read.
func Address(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
