package ratelimit

import "testing"

// TestSlots: a key holds at most PerKey, all keys at most Total, and a
// release (once, even if called twice) frees the slot for anyone.
func TestSlots(t *testing.T) {
	s := NewSlots(2, 3)
	var releases []func()
	take := func(key string, want Refusal) {
		t.Helper()
		release, why := s.Take(key)
		if why != want {
			t.Fatalf("Take(%q) with %d in use: %v, want %v", key, s.InUse(), why, want)
		}
		if release != nil {
			releases = append(releases, release)
		}
	}
	take("a", Taken)
	take("a", Taken)
	take("a", KeyFull) // a's own limit, though slots remain
	take("b", Taken)
	take("c", AllFull) // c has none, but all are held
	releases[0]()
	releases[0]() // a second release frees nothing more
	if got := s.InUse(); got != 2 {
		t.Fatalf("in use after one release: %d, want 2", got)
	}
	take("c", Taken)
	take("a", AllFull)
	for _, r := range releases {
		r()
	}
	if got, keys := s.InUse(), len(s.held); got != 0 || keys != 0 {
		t.Fatalf("after every release: %d in use, %d keys kept; want none", got, keys)
	}
}
