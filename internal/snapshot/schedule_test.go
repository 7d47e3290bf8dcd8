package snapshot

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPrune(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		keep  int
		want  []string
	}{
		{"keeps the newest", []string{"muster-20260101T000000.000Z.snapshot", "muster-20260102T000000.000Z.snapshot", "muster-20260103T000000.000Z.snapshot"}, 2,
			[]string{"muster-20260102T000000.000Z.snapshot", "muster-20260103T000000.000Z.snapshot"}},
		{"leaves other files", []string{"notes.txt", "muster-20260101T000000.000Z.snapshot", "muster-20260102T000000.000Z.snapshot"}, 1,
			[]string{"muster-20260102T000000.000Z.snapshot", "notes.txt"}},
		{"zero keeps all", []string{"muster-20260101T000000.000Z.snapshot"}, 0, []string{"muster-20260101T000000.000Z.snapshot"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := Prune(dir, tc.keep); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("left %v, want %v", got, tc.want)
			}
		})
	}
}
