package history

import (
	"testing"
)

func TestRecordsOf(t *testing.T) {
	cases := []struct {
		name  string
		value string
		want  []int64 // seqs
	}{
		{"machine", `{"kind":"Machine","metadata":{"name":"m","uid":"u"},"status":{"transitions":[{"from":"Pending","to":"Running","event":"register","time":"2026-11-24T00:00:00Z","seq":7,"by":"admin"}]}}`, []int64{7}},
		{"unnumbered records by position", `{"kind":"Cluster","metadata":{"name":"c","uid":"u"},"status":{"transitions":[{"from":"a","to":"b","event":"e","time":"2026-11-24T00:00:00Z"},{"from":"b","to":"a","event":"e","time":"2026-11-24T00:00:00Z"}]}}`, []int64{1, 2}},
		{"kind without a lifecycle", `{"kind":"MachinePlan","metadata":{"name":"m","uid":"u"},"status":{}}`, nil},
		{"not JSON", `k8s\x00protobuf`, nil},
		{"no uid", `{"kind":"Machine","metadata":{"name":"m"},"status":{"transitions":[{"from":"a","to":"b","event":"e","time":"2026-11-24T00:00:00Z"}]}}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := recordsOf([]byte(tc.value), 42)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d records, want %d", len(got), len(tc.want))
			}
			for i, r := range got {
				if r.Seq != tc.want[i] || r.Revision != 42 || r.UID != "u" {
					t.Errorf("record %d = %+v", i, r)
				}
			}
		})
	}
}

func TestParseObject(t *testing.T) {
	cases := []struct{ arg, kind, name string }{
		{"machine/node-1", "Machine", "node-1"},
		{"Machines/node-1", "Machine", "node-1"},
		{"token/abc", "ClusterRegistrationToken", "abc"},
		{"pod/x", "", ""},
		{"machine/", "", ""},
		{"machine", "", ""},
	}
	for _, tc := range cases {
		kind, name, err := ParseObject(tc.arg)
		if (err != nil) != (tc.kind == "") || kind != tc.kind || name != tc.name {
			t.Errorf("ParseObject(%q) = %q, %q, %v", tc.arg, kind, name, err)
		}
	}
}
