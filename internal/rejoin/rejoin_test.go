package rejoin

import (
	"strings"
	"testing"
	"time"
)

// TestAdmits: only a certificate issued between the snapshot and the
// restore rejoins; one issued before the snapshot belongs to a Machine the
// snapshot held (so it was deleted), one issued after the restore to a
// Machine made since (so it was deleted too).
func TestAdmits(t *testing.T) {
	taken := time.Date(2026, 11, 27, 2, 0, 0, 500e6, time.UTC)
	restored := taken.Add(6 * time.Hour)
	rec := &Record{SnapshotTaken: taken, Restored: restored, Revision: 42}
	for _, tc := range []struct {
		name   string
		rec    *Record
		issued time.Time
		want   string // "" admits; else a word of the refusal
	}{
		{"no restore", nil, taken.Add(time.Hour), "not restored"},
		{"no issue time", rec, time.Time{}, "no certificate issue time"},
		{"issued long before the snapshot", rec, taken.Add(-time.Hour), "before the snapshot"},
		{"issued in the snapshot's second, read whole-second early", rec, taken.Truncate(time.Second), ""},
		{"issued a second before the snapshot", rec, taken.Add(-1500 * time.Millisecond), "before the snapshot"},
		{"issued after the snapshot", rec, taken.Add(time.Hour), ""},
		{"issued at the restore", rec, restored, "after the restore"},
		{"issued after the restore", rec, restored.Add(time.Minute), "after the restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.rec.Admits(tc.issued)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Admits(%s) = %q; want %q", tc.issued, got, tc.want)
			}
		})
	}
}

func TestRecordEncode(t *testing.T) {
	rec := Record{SnapshotTaken: time.Unix(100, 0).UTC(), Restored: time.Unix(200, 0).UTC(), Revision: 7}
	if got := string(rec.Encode()); got != `{"snapshotTaken":"1970-01-01T00:01:40Z","restored":"1970-01-01T00:03:20Z","revision":7}` {
		t.Errorf("Encode = %s", got)
	}
}
