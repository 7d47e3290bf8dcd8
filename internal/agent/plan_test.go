package agent

import "testing"

func TestNewerResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true},
		{"9", "10", false},
		{"10", "10", false},
		{"", "10", false},
		{"10", "", false},
		{"x", "1", false},
	} {
		if got := newer(tc.a, tc.b); got != tc.want {
			t.Errorf("newer(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
