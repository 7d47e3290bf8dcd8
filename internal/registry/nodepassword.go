package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// NodePassword is the storage description of node-password hashes.
var NodePassword = Kind[*api.NodePassword]{
	Resource:       "nodepasswords",
	Singular:       "nodepassword",
	ShortNames:     []string{"npw"},
	New:            func() *api.NodePassword { return &api.NodePassword{} },
	NewList:        func() runtime.Object { return &api.NodePasswordList{} },
	Fields:         api.NodePasswordFields,
	Validate:       validation.ValidateNodePassword,
	ValidateUpdate: validation.ValidateNodePasswordUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Machine", Type: "string", Description: "Machine that owns the password."},
		{Name: "Last-Verified", Type: "string", Description: "When a registration last presented the right password."},
	},
	Cells: func(n *api.NodePassword) []interface{} {
		return []interface{}{n.Status.Machine, since(n.Status.LastVerified)}
	},
}
