package agent

import (
	"strings"
	"testing"
)

func TestCheckServerURL(t *testing.T) {
	for _, tc := range []struct {
		server string
		want   string // "" when accepted
	}{
		{"https://10.0.0.1:9443", ""},
		{"https://muster.example", ""},
		{"127.0.0.1:9443", "use --server https://127.0.0.1:9443"},
		{"muster.example:9443", "use --server https://muster.example:9443"},
		{"http://127.0.0.1:9443", "use --server https://127.0.0.1:9443"},
		{"ftp://127.0.0.1", `scheme "ftp"`},
		{"https://", "names no host"},
	} {
		err := checkServerURL(tc.server)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkServerURL(%q) = %v, want %q", tc.server, err, tc.want)
		}
	}
}

func TestPortHint(t *testing.T) {
	if h := portHint("https://10.0.0.1:9443"); h != "" {
		t.Errorf("a URL with a port got a hint: %s", h)
	}
	if h := portHint("https://10.0.0.1"); !strings.Contains(h, "port 443") || !strings.Contains(h, "https://10.0.0.1:9443") {
		t.Errorf("portHint without a port: %q", h)
	}
}
