package validation

import (
	"fmt"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Bounds of a binding: the authorizer reads every binding of a user on
// every request, so neither a binding nor its lists may grow without end.
const (
	maxBindingSubjects = 100
	maxBindingClusters = 1000
	maxSubjectNameLen  = 256
)

// ValidateAccessBinding checks a binding on its own: who may write it is
// the authorizer's and the escalation check's (internal/apiserver).
func ValidateAccessBinding(b *api.AccessBinding) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	switch b.Spec.Role {
	case api.AccessViewer, api.AccessOperator, api.AccessAdmin:
	default:
		errs = append(errs, field.NotSupported(spec.Child("role"), b.Spec.Role, []string{string(api.AccessViewer), string(api.AccessOperator), string(api.AccessAdmin)}))
	}
	subjects := spec.Child("subjects")
	if len(b.Spec.Subjects) == 0 {
		errs = append(errs, field.Required(subjects, "name at least one user or group (kind: User or Group, name: as they authenticate)"))
	}
	if len(b.Spec.Subjects) > maxBindingSubjects {
		errs = append(errs, field.TooMany(subjects, len(b.Spec.Subjects), maxBindingSubjects))
	}
	for i, s := range b.Spec.Subjects {
		p := subjects.Index(i)
		if s.Kind != api.AccessUser && s.Kind != api.AccessGroup {
			errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{string(api.AccessUser), string(api.AccessGroup)}))
		}
		if s.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), "the user or group name, exactly as it authenticates"))
		}
		errs = append(errs, validateMaxLen(s.Name, maxSubjectNameLen, p.Child("name"))...)
	}
	scope := spec.Child("scope")
	set := 0
	if b.Spec.Scope.AllClusters {
		set++
	}
	if len(b.Spec.Scope.Clusters) > 0 {
		set++
	}
	if b.Spec.Scope.ClusterSelector != nil {
		set++
	}
	if set != 1 {
		errs = append(errs, field.Invalid(scope, fmt.Sprintf("%d of allClusters, clusters, clusterSelector set", set),
			"set exactly one: allClusters: true, a list of clusters, or a clusterSelector"))
	}
	if len(b.Spec.Scope.Clusters) > maxBindingClusters {
		errs = append(errs, field.TooMany(scope.Child("clusters"), len(b.Spec.Scope.Clusters), maxBindingClusters))
	}
	seen := map[string]bool{}
	for i, c := range b.Spec.Scope.Clusters {
		errs = append(errs, validateDNSSubdomain(c, scope.Child("clusters").Index(i), true)...)
		if seen[c] {
			errs = append(errs, field.Duplicate(scope.Child("clusters").Index(i), c))
		}
		seen[c] = true
	}
	if sel := b.Spec.Scope.ClusterSelector; sel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, scope.Child("clusterSelector"))...)
		if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(scope.Child("clusterSelector"), "{}", "an empty selector selects every cluster: say allClusters: true instead"))
		}
	}
	return errs
}
