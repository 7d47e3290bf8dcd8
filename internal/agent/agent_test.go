package agent

import (
	"net"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

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

func TestDrift(t *testing.T) {
	m := &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{"site": "17", "muster.io/cluster": "c"}},
		Spec: api.MachineSpec{Roles: []string{"worker", "etcd"}}}
	tests := []struct {
		name     string
		nodeName string
		labels   map[string]string
		roles    []string
		want     []string
	}{
		{"same flags", "edge-1", map[string]string{"site": "17"}, []string{"etcd", "worker"}, nil},
		{"no flags but the name", "edge-1", nil, nil, nil},
		{"another name", "edge-2", nil, nil, []string{"kubectl delete machine edge-1"}},
		{"another label value", "edge-1", map[string]string{"site": "18"}, nil, []string{"kubectl label machine edge-1 site=18 --overwrite"}},
		{"another role", "edge-1", nil, []string{"worker"}, []string{`kubectl patch machine edge-1 --type=merge -p '{"spec":{"roles":["worker"]}}'`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drift(tt.nodeName, tt.labels, tt.roles, m)
			if len(got) != len(tt.want) {
				t.Fatalf("drift = %q, want %d warnings", got, len(tt.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("warning %q does not say %q", got[i], tt.want[i])
				}
			}
		})
	}
}

// TestInternalIPs: a machine reports its addresses of both families, IPv4
// first; loopback and IPv6 link-local (useless without a zone) are left out.
func TestInternalIPs(t *testing.T) {
	var addrs []net.Addr
	for _, cidr := range []string{"127.0.0.1/8", "::1/128", "10.0.0.5/24", "fe80::1/64", "2001:db8::5/64", "192.168.1.9/24", "fd00::9/64"} {
		ip, ipn, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		ipn.IP = ip
		addrs = append(addrs, ipn)
	}
	var got []string
	for _, a := range internalIPs(addrs) {
		got = append(got, a.Address)
	}
	if want := []string{"10.0.0.5", "192.168.1.9", "2001:db8::5", "fd00::9"}; !slices.Equal(got, want) {
		t.Errorf("internalIPs = %v, want %v", got, want)
	}
}
