package registry

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// AccessBinding is the storage description of access bindings: who holds
// which role on which clusters (internal/apiserver/scope.go reads them).
var AccessBinding = Kind[*api.AccessBinding]{
	Resource:       "accessbindings",
	Singular:       "accessbinding",
	ShortNames:     []string{"ab"},
	New:            func() *api.AccessBinding { return &api.AccessBinding{} },
	NewList:        func() runtime.Object { return &api.AccessBindingList{} },
	Fields:         api.AccessBindingFields,
	Validate:       validation.ValidateAccessBinding,
	ValidateUpdate: func(b, _ *api.AccessBinding) field.ErrorList { return validation.ValidateAccessBinding(b) },
	Columns: []metav1.TableColumnDefinition{
		{Name: "Role", Type: "string", Description: "Viewer, Operator or Admin."},
		{Name: "Scope", Type: "string", Description: "The clusters the role reaches."},
		{Name: "Subjects", Type: "string", Description: "The users and groups it is granted to."},
	},
	Cells: func(b *api.AccessBinding) []interface{} {
		scope := "all clusters"
		switch {
		case len(b.Spec.Scope.Clusters) > 0:
			scope = strings.Join(b.Spec.Scope.Clusters, ",")
		case b.Spec.Scope.ClusterSelector != nil:
			scope = metav1.FormatLabelSelector(b.Spec.Scope.ClusterSelector)
		}
		var subjects []string
		for _, s := range b.Spec.Subjects {
			subjects = append(subjects, strings.ToLower(string(s.Kind))+":"+s.Name)
		}
		return []interface{}{string(b.Spec.Role), scope, strings.Join(subjects, ",")}
	},
}
