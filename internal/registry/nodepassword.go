package registry

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// NodePassword is the storage description of node-password hashes.
var NodePassword = Kind[*api.NodePassword]{
	Resource:   "nodepasswords",
	Singular:   "nodepassword",
	ShortNames: []string{"npw"},
	New:        func() *api.NodePassword { return &api.NodePassword{} },
	NewList:    func() runtime.Object { return &api.NodePasswordList{} },
	Fields:     api.NodePasswordFields,
	Validate: func(n *api.NodePassword) field.ErrorList {
		// The hash is opaque here; its parser is the node-password verifier.
		// Refuse anything that looks like a plaintext password instead of a hash.
		if strings.Count(n.Spec.Hash, "$") < 3 || len(n.Spec.Hash) > 512 {
			return field.ErrorList{field.Invalid(field.NewPath("spec", "hash"), "<redacted>",
				`must be a hash in the form "<algorithm>$<parameters>$<salt>$<hash>", never a plaintext password`)}
		}
		return nil
	},
	ValidateUpdate: func(n, old *api.NodePassword) field.ErrorList {
		if n.Spec.Hash != old.Spec.Hash {
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "hash"),
				"is immutable: delete the Machine (and with it this NodePassword) to let the node register with a new password")}
		}
		return nil
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Machine", Type: "string", Description: "Machine that owns the password."},
		{Name: "Last-Verified", Type: "string", Description: "When a registration last presented the right password."},
	},
	Cells: func(n *api.NodePassword) []interface{} {
		return []interface{}{n.Status.Machine, since(n.Status.LastVerified)}
	},
}
