package validation

import (
	"strings"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestValidateMachinePoolRoles: a pool's roles go on every Machine it
// makes, so they are held to a Machine's rules at the pool's admission.
func TestValidateMachinePoolRoles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		roles []string
		want  string // "" for valid
	}{
		{"none", nil, ""},
		{"the three of a cluster", []string{"etcd", "controlplane", "worker"}, ""},
		{"not a DNS label", []string{"Control_Plane"}, "spec.template.roles[0]"},
		{"repeated", []string{"worker", "worker"}, "Duplicate value"},
		{"too many", strings.Split("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", ","), "must have at most 16 items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &api.MachinePool{Spec: api.MachinePoolSpec{Cluster: "edge", Replicas: 1,
				Template: api.MachineTemplate{Driver: "ssh", Roles: tc.roles}}}
			errs := ValidateMachinePool(p).ToAggregate()
			switch {
			case tc.want == "" && errs != nil:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && (errs == nil || !strings.Contains(errs.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", errs, tc.want)
			}
		})
	}
}
