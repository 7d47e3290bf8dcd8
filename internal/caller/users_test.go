package caller

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// An identity provider's token may make administrators and the built-in
// roles, never an agent, a bootstrap caller, a server or Kubernetes.
func TestCheckExternal(t *testing.T) {
	machine, machineGroups := MachineSubject("m1", "uid1", "c1")
	server, serverGroups := ServerSubject("s1")
	for _, c := range []struct {
		name   string
		groups []string
		ok     bool
	}{
		{"alice@example.com", []string{OperatorsGroup, "team-a"}, true},
		{"root@example.com", []string{user.SystemPrivilegedGroup}, true},
		{machine, nil, false},
		{"alice@example.com", machineGroups, false},
		{"alice@example.com", machineGroups[2:], false}, // only the machine's cluster group
		{server, nil, false},
		{"alice@example.com", serverGroups, false},
		{BootstrapUser("abcdef"), nil, false},
		{"alice@example.com", []string{BootstrappersGroup}, false},
		{"system:kube-controller-manager", nil, false},
		{"alice@example.com", []string{"system:nodes"}, false},
	} {
		err := CheckExternal(&user.DefaultInfo{Name: c.name, Groups: c.groups})
		if (err == nil) != c.ok {
			t.Errorf("%s %v: got %v, want allowed=%v", c.name, c.groups, err, c.ok)
		}
	}
}
