package jointoken

import (
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestUses(t *testing.T) {
	for _, tc := range []struct {
		max, used int32
		want      string
	}{
		{0, 3, "3/unlimited"},
		{1, 0, "0/1"},
		{1, 1, "1/1 (used up)"},
		{5, 2, "2/5"},
	} {
		tok := &api.ClusterRegistrationToken{Spec: api.ClusterRegistrationTokenSpec{MaxUses: tc.max}, Status: api.ClusterRegistrationTokenStatus{Registrations: tc.used}}
		if got := Uses(tok); got != tc.want {
			t.Errorf("Uses(max %d, used %d) = %q, want %q", tc.max, tc.used, got, tc.want)
		}
	}
}
