package registry

import (
	"regexp"

	"github.com/muster-io/muster/internal/jointoken"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
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

// ClusterRegistrationToken is the storage description of join tokens.
var ClusterRegistrationToken = Kind[*api.ClusterRegistrationToken]{
	Resource:   "clusterregistrationtokens",
	Singular:   "clusterregistrationtoken",
	ShortNames: []string{"crt", "jointoken"},
	New:        func() *api.ClusterRegistrationToken { return &api.ClusterRegistrationToken{} },
	NewList:    func() runtime.Object { return &api.ClusterRegistrationTokenList{} },
	Fields:     api.ClusterRegistrationTokenFields,
	Lifecycle:  fsm.Token,
	Prepare: func(t, old *api.ClusterRegistrationToken) {
		if old == nil && t.Spec.TTL != nil && t.Spec.TTL.Duration > 0 {
			expires := metav1.NewTime(nowFunc().Add(t.Spec.TTL.Duration))
			t.Status.ExpiresAt = &expires
		}
	},
	Validate: func(t *api.ClusterRegistrationToken) field.ErrorList {
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
	},
	ValidateUpdate: func(t, old *api.ClusterRegistrationToken) field.ErrorList {
		spec := field.NewPath("spec")
		errs := validateImmutable(t.Spec.SecretHash, old.Spec.SecretHash, spec.Child("secretHash"))
		errs = append(errs, validateImmutable(t.Spec.TTL, old.Spec.TTL, spec.Child("ttl"))...)
		return append(errs, validateImmutable(t.Spec.Cluster, old.Spec.Cluster, spec.Child("cluster"))...)
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Phase", Type: "string", Description: "Active, Expired or Revoked."},
		{Name: "Cluster", Type: "string", Description: "Cluster the token is bound to, if any."},
		{Name: "Approval", Type: "string", Description: "Whether registrations wait for manual approval."},
		{Name: "Expires", Type: "string", Description: "When the token expires."},
		{Name: "Uses", Type: "string", Description: "Registrations accepted with the token, of how many it may make (\"used up\" when none is left)."},
	},
	Cells: func(t *api.ClusterRegistrationToken) []interface{} {
		approval, expires := "auto", "never"
		if t.Spec.ManualApproval {
			approval = "manual"
		}
		if t.Status.ExpiresAt != nil {
			expires = t.Status.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		return []interface{}{string(t.Status.Phase), t.Spec.Cluster, approval, expires, jointoken.Uses(t)}
	},
}
