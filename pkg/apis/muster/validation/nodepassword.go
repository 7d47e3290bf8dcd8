package validation

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ValidateNodePassword checks that a NodePassword holds a hash. The hash
// is opaque here; its parser is the node-password verifier. Anything that
// looks like a plaintext password instead of a hash is refused.
func ValidateNodePassword(n *api.NodePassword) field.ErrorList {
	if strings.Count(n.Spec.Hash, "$") < 3 || len(n.Spec.Hash) > 512 {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "hash"), "<redacted>",
			`must be a hash in the form "<algorithm>$<parameters>$<salt>$<hash>", never a plaintext password`)}
	}
	return nil
}

// ValidateNodePasswordUpdate refuses a change of the hash.
func ValidateNodePasswordUpdate(n, old *api.NodePassword) field.ErrorList {
	if n.Spec.Hash != old.Spec.Hash {
		return field.ErrorList{field.Forbidden(field.NewPath("spec", "hash"),
			"is immutable: delete the Machine (and with it this NodePassword) to let the node register with a new password")}
	}
	return nil
}
