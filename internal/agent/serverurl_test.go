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
		// IPv6: a literal in brackets is fine; without them it is refused
		// with the bracketed form to use.
		{"https://[::1]:9443", ""},
		{"https://[2001:db8::1]:9443", ""},
		{"https://2001:db8::1:9443", "in brackets"},
		{"https://::1:9443", "like --server https://[::1]:9443"},
		{"https://2001:db8::1", "in brackets"},
	} {
		err := checkServerURL(tc.server)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkServerURL(%q) = %v, want %q", tc.server, err, tc.want)
		}
	}
}

func TestCheckServerURLSuggestsBrackets(t *testing.T) {
	err := checkServerURL("https://2001:db8::1:9443")
	if err == nil || !strings.Contains(err.Error(), "https://[2001:db8::1]:9443") {
		t.Fatalf("got %v, want the bracketed https://[2001:db8::1]:9443", err)
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
