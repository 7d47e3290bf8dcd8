package registry

import (
	"github.com/muster-io/muster/internal/jointoken"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
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
	Validate:       validation.ValidateClusterRegistrationToken,
	ValidateUpdate: validation.ValidateClusterRegistrationTokenUpdate,
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
