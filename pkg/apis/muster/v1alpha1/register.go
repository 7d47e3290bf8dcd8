package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group every Muster kind belongs to.
const GroupName = "muster.io"

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// HeartbeatPath is where an agent shows, with its machine certificate,
// that it is alive: a GET that reads nothing and answers 204 No Content.
// The server notes the hearing in memory (no datastore write), and a
// voided certificate gets its 403 here as on any request.
const HeartbeatPath = "/heartbeat"

// Resource qualifies a resource name with this package's group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers this version's types; AddToScheme applies it.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

// knownTypes lists every kind and its list; kept in one place so that the
// internal-version registration in the server cannot drift from it.
func knownTypes() []runtime.Object {
	return []runtime.Object{
		&Cluster{}, &ClusterList{},
		&ClusterRegistrationToken{}, &ClusterRegistrationTokenList{},
		&ClusterRegistration{}, &ClusterRegistrationList{},
		&Machine{}, &MachineList{},
		&MachinePlan{}, &MachinePlanList{},
		&NodePassword{}, &NodePasswordList{},
		&ServerEndpoint{}, &ServerEndpointList{},
		&ControllerLease{}, &ControllerLeaseList{},
		&MachinePool{}, &MachinePoolList{},
		&MachinePlanSet{}, &MachinePlanSetList{},
		&AccessBinding{}, &AccessBindingList{},
		&NotificationSubscription{}, &NotificationSubscriptionList{},
	}
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, knownTypes()...)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return addFieldLabelConversions(scheme)
}

// AddToSchemeAsInternal registers the same Go types as the group's internal
// version, which the apiserver's storage machinery requires. One Go type for
// both versions means no conversion functions while v1alpha1 is the only version.
func AddToSchemeAsInternal(scheme *runtime.Scheme) error {
	internal := schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}
	scheme.AddKnownTypes(internal, knownTypes()...)
	return nil
}

// RegistrationName is the name of the ClusterRegistration an agent makes for
// one attempt: like Fleet's, derived from clientID and clientRandom, so a
// retried request finds the object it already made, and unguessable
// without the clientRandom.
func RegistrationName(clientID, clientRandom string) string {
	sum := sha256.Sum256([]byte(clientID + clientRandom))
	return "c-" + hex.EncodeToString(sum[:])[:40]
}
