package agent

import "testing"

func TestRejoinCommand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"muster-agent", "--server", "https://s:9443", "--token", "K10x::a.b", "--role", "worker"},
			"muster-agent --server https://s:9443 --role worker --token-file /path/to/token"},
		{[]string{"/usr/bin/muster-agent", "--token=K10x::a.b", "--node-name", "n1"},
			"/usr/bin/muster-agent --node-name n1 --token-file /path/to/token"},
		{[]string{"muster-agent", "--token-file", "/etc/muster/token", "--data-dir", "/d"},
			"muster-agent --data-dir /d --token-file /path/to/token"},
		{nil, "muster-agent --data-dir /d --token-file /path/to/token"},
	}
	for _, tt := range tests {
		if got := rejoinCommand(tt.args, "/d"); got != tt.want {
			t.Errorf("rejoinCommand(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
