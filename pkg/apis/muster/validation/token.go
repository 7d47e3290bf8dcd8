package validation

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

var (
	// tokenIDPattern is the k3s token-id shape: the part before the dot of
	// "<id>.<secret>", safe in a bearer token and in an object name.
	tokenIDPattern = regexp.MustCompile(`^[a-z0-9]{6,32}$`)
	// secretHashPattern: the only hash accepted today is SHA-256 of a secret
	// of at least 128 random bits, which needs no slow hash (see docs/security.md).
	secretHashPattern = regexp.MustCompile(`^sha256\$[0-9a-f]{64}$`)
)

// ValidateClusterRegistrationToken checks a join token: its name is the
// token ID, and it stores the secret's hash, never the secret.
func ValidateClusterRegistrationToken(t *api.ClusterRegistrationToken) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if !tokenIDPattern.MatchString(t.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), t.Name,
			"a token ID must be 6 to 32 lowercase letters and digits"))
	}
	if !secretHashPattern.MatchString(t.Spec.SecretHash) {
		errs = append(errs, field.Invalid(spec.Child("secretHash"), "<redacted>",
			`must be "sha256$" followed by 64 lowercase hex digits; create tokens with "muster-server token create"`))
	}
	if t.Spec.TTL != nil && t.Spec.TTL.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("ttl"), t.Spec.TTL.Duration.String(), "must not be negative"))
	}
	errs = append(errs, validateDNSSubdomain(t.Spec.Cluster, spec.Child("cluster"), false)...)
	errs = append(errs, validateMaxLen(t.Spec.Description, 1024, spec.Child("description"))...)
	errs = append(errs, validateNonNegative(t.Spec.MaxUses, spec.Child("maxUses"))...)
	return errs
}

// ValidateClusterRegistrationTokenUpdate refuses a change of a token's
// secret hash, lifetime and cluster.
func ValidateClusterRegistrationTokenUpdate(t, old *api.ClusterRegistrationToken) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateImmutable(t.Spec.SecretHash, old.Spec.SecretHash, spec.Child("secretHash"))
	errs = append(errs, validateImmutable(t.Spec.TTL, old.Spec.TTL, spec.Child("ttl"))...)
	return append(errs, validateImmutable(t.Spec.Cluster, old.Spec.Cluster, spec.Child("cluster"))...)
}
