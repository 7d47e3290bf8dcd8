package kubectlmuster

import (
	"strings"
	"testing"
)

func TestParseMachine(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"machine/edge-1", "edge-1", ""},
		{"machines/edge-1", "edge-1", ""},
		{"ma/edge-1", "edge-1", ""},
		{"machine.muster.io/edge-1", "edge-1", ""},
		{"edge-1", "edge-1", ""},
		{"pod/edge-1", "", "machine/NAME"},
		{"machine/", "", "name is missing"},
	} {
		got, err := ParseMachine(tc.in)
		if got != tc.want || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseMachine(%q) = %q, %v; want %q, error saying %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in            string
		local, remote int
		ok            bool
	}{
		{"9100", 9100, 9100, true},
		{"8080:80", 8080, 80, true},
		{"0:80", 0, 80, true}, // a free local port
		{"8080:0", 0, 0, false},
		{"8080:70000", 0, 0, false},
		{"70000:80", 0, 0, false},
		{"x", 0, 0, false},
		{"", 0, 0, false},
	} {
		l, r, err := ParsePorts(tc.in)
		if (err == nil) != tc.ok || tc.ok && (l != tc.local || r != tc.remote) {
			t.Errorf("ParsePorts(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, l, r, err, tc.local, tc.remote, tc.ok)
		}
	}
}
