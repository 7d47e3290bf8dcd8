package v1alpha1

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// This file is the single list of the fields `kubectl get --field-selector`
// accepts per kind. The server's storage indexes by these same functions, and
// the scheme's field-label conversion accepts exactly their keys, so a
// selectable field cannot be declared in one place and missing in the other.

func objectMetaFields(name string) fields.Set {
	return fields.Set{"metadata.name": name}
}

func merge(a, b fields.Set) fields.Set {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// ClusterFields returns the selectable fields of a Cluster.
func ClusterFields(o *Cluster) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{"status.phase": string(o.Status.Phase)})
}

// ClusterRegistrationTokenFields returns the selectable fields of a ClusterRegistrationToken.
func ClusterRegistrationTokenFields(o *ClusterRegistrationToken) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{
		"spec.cluster": o.Spec.Cluster,
		"status.phase": string(o.Status.Phase),
	})
}

// ClusterRegistrationFields returns the selectable fields of a ClusterRegistration.
func ClusterRegistrationFields(o *ClusterRegistration) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{
		"spec.clientID": o.Spec.ClientID,
		"spec.nodeName": o.Spec.NodeName,
		"spec.tokenID":  o.Spec.TokenID,
		"spec.cluster":  o.ClusterName(),
		"status.phase":  string(o.Status.Phase),
	})
}

// ClusterName is the cluster a registration belongs to: the one it joined,
// or, while it waits, the one its join token is bound to ("" for neither).
func (o *ClusterRegistration) ClusterName() string {
	if o.Status.Cluster != "" {
		return o.Status.Cluster
	}
	return o.Spec.Cluster
}

// AccessBindingFields returns the selectable fields of an AccessBinding.
func AccessBindingFields(o *AccessBinding) fields.Set {
	return objectMetaFields(o.Name)
}

// MachineFields returns the selectable fields of a Machine.
func MachineFields(o *Machine) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{
		"spec.cluster":     o.Spec.Cluster,
		"spec.nodeName":    o.Spec.NodeName,
		"status.phase":     string(o.Status.Phase),
		"status.planState": string(o.Status.PlanState),
	})
}

// MachinePlanFields returns the selectable fields of a MachinePlan.
func MachinePlanFields(o *MachinePlan) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{"status.state": string(o.Status.State)})
}

// NodePasswordFields returns the selectable fields of a NodePassword.
func NodePasswordFields(o *NodePassword) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{"status.machine": o.Status.Machine})
}

// ServerEndpointFields returns the selectable fields of a ServerEndpoint.
func ServerEndpointFields(o *ServerEndpoint) fields.Set {
	return objectMetaFields(o.Name)
}

// ControllerLeaseFields returns the selectable fields of a ControllerLease.
func ControllerLeaseFields(o *ControllerLease) fields.Set {
	return objectMetaFields(o.Name)
}

// MachinePoolFields returns the selectable fields of a MachinePool.
func MachinePoolFields(o *MachinePool) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{"spec.cluster": o.Spec.Cluster})
}

// MachinePlanSetFields returns the selectable fields of a MachinePlanSet.
func MachinePlanSetFields(o *MachinePlanSet) fields.Set {
	return merge(objectMetaFields(o.Name), fields.Set{"spec.cluster": o.Spec.Cluster})
}

// NotificationSubscriptionFields returns the selectable fields of a NotificationSubscription.
func NotificationSubscriptionFields(o *NotificationSubscription) fields.Set {
	return objectMetaFields(o.Name)
}

// selectableFieldKeys derives each kind's accepted keys from the functions above.
func selectableFieldKeys() map[string]fields.Set {
	return map[string]fields.Set{
		"Cluster":                  ClusterFields(&Cluster{}),
		"ClusterRegistrationToken": ClusterRegistrationTokenFields(&ClusterRegistrationToken{}),
		"ClusterRegistration":      ClusterRegistrationFields(&ClusterRegistration{}),
		"Machine":                  MachineFields(&Machine{}),
		"MachinePlan":              MachinePlanFields(&MachinePlan{}),
		"NodePassword":             NodePasswordFields(&NodePassword{}),
		"ServerEndpoint":           ServerEndpointFields(&ServerEndpoint{}),
		"ControllerLease":          ControllerLeaseFields(&ControllerLease{}),
		"MachinePool":              MachinePoolFields(&MachinePool{}),
		"MachinePlanSet":           MachinePlanSetFields(&MachinePlanSet{}),
		"AccessBinding":            AccessBindingFields(&AccessBinding{}),
		"NotificationSubscription": NotificationSubscriptionFields(&NotificationSubscription{}),
	}
}

func addFieldLabelConversions(scheme *runtime.Scheme) error {
	for kind, set := range selectableFieldKeys() {
		allowed := set
		kind := kind
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind),
			func(label, value string) (string, string, error) {
				if _, ok := allowed[label]; ok {
					return label, value, nil
				}
				return "", "", fmt.Errorf("field label %q is not supported for %s: use one of %v", label, kind, sortedKeys(allowed))
			})
		if err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys(s fields.Set) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
