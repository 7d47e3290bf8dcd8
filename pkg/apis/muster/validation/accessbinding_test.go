package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestValidateAccessBinding: a binding names its subjects, one of the
// three roles, and exactly one kind of scope; each refusal names its field.
func TestValidateAccessBinding(t *testing.T) {
	good := func() *api.AccessBinding {
		return &api.AccessBinding{Spec: api.AccessBindingSpec{
			Role:     api.AccessOperator,
			Subjects: []api.AccessSubject{{Kind: api.AccessGroup, Name: "team-a"}},
			Scope:    api.AccessScope{Clusters: []string{"edge-east"}},
		}}
	}
	tests := []struct {
		name   string
		change func(*api.AccessBinding)
		field  string // "" when valid
	}{
		{"valid", func(*api.AccessBinding) {}, ""},
		{"all clusters", func(b *api.AccessBinding) { b.Spec.Scope = api.AccessScope{AllClusters: true} }, ""},
		{"selector", func(b *api.AccessBinding) {
			b.Spec.Scope = api.AccessScope{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}
		}, ""},
		{"unknown role", func(b *api.AccessBinding) { b.Spec.Role = "Owner" }, "spec.role"},
		{"no subjects", func(b *api.AccessBinding) { b.Spec.Subjects = nil }, "spec.subjects"},
		{"unknown subject kind", func(b *api.AccessBinding) { b.Spec.Subjects[0].Kind = "ServiceAccount" }, "spec.subjects[0].kind"},
		{"empty subject name", func(b *api.AccessBinding) { b.Spec.Subjects[0].Name = "" }, "spec.subjects[0].name"},
		{"no scope", func(b *api.AccessBinding) { b.Spec.Scope = api.AccessScope{} }, "spec.scope"},
		{"two scopes", func(b *api.AccessBinding) { b.Spec.Scope.AllClusters = true }, "spec.scope"},
		{"bad cluster name", func(b *api.AccessBinding) { b.Spec.Scope.Clusters = []string{"Not_A_Name"} }, "spec.scope.clusters[0]"},
		{"duplicate cluster", func(b *api.AccessBinding) { b.Spec.Scope.Clusters = []string{"a", "a"} }, "spec.scope.clusters[1]"},
		{"empty selector", func(b *api.AccessBinding) { b.Spec.Scope = api.AccessScope{ClusterSelector: &metav1.LabelSelector{}} }, "spec.scope.clusterSelector"},
	}
	for _, tt := range tests {
		b := good()
		tt.change(b)
		errs := ValidateAccessBinding(b)
		if tt.field == "" {
			if len(errs) > 0 {
				t.Errorf("%s: refused: %v", tt.name, errs)
			}
			continue
		}
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tt.field) {
			t.Errorf("%s: want a refusal naming %s, got %v", tt.name, tt.field, errs)
		}
	}
}
