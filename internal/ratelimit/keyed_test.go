package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestKeyedTake(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	k := NewKeyed(3)
	k.Now = func() time.Time { return now }
	steps := []struct {
		name    string
		advance time.Duration
		key     string
		wantOK  bool
	}{
		{"first of the burst", 0, "a", true},
		{"second of the burst", 0, "a", true},
		{"burst spent", 0, "a", false},
		{"refused again: a refusal spends nothing", 0, "a", false},
		{"another key has its own bucket", 0, "b", true},
		{"one token back after its interval", time.Second, "a", true},
		{"and spent again", 0, "a", false},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		got := k.Take(s.key, rate.Every(time.Second), 2)
		if (got == 0) != s.wantOK {
			t.Errorf("%s: Take(%q) = %s, want ok=%v", s.name, s.key, got, s.wantOK)
		}
		if !s.wantOK && (got <= 0 || got > time.Second) {
			t.Errorf("%s: retry after %s, want within the refill interval", s.name, got)
		}
	}
}

// A flood of distinct keys never grows the table past Max.
func TestKeyedBounded(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	k := NewKeyed(100)
	k.Now = func() time.Time { return now }
	for i := range 10000 {
		now = now.Add(time.Millisecond)
		if d := k.Take(fmt.Sprint("addr-", i), rate.Every(time.Second), 1); d != 0 {
			t.Fatalf("a new key's first call was refused (%s)", d)
		}
		if k.Len() > 100 {
			t.Fatalf("table holds %d buckets after %d keys, want at most 100", k.Len(), i+1)
		}
	}
	// Idle buckets go first: after a minute the table makes room without
	// evicting anyone recent.
	now = now.Add(2 * idleAfter)
	k.Take("late", rate.Every(time.Second), 1)
	if k.Len() != 1 {
		t.Errorf("after every bucket went idle the table holds %d, want 1", k.Len())
	}
}
