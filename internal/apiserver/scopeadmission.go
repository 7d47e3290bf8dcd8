package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/routine"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ScopeAdmission judges what a user with cluster-scoped access writes by
// the object written: its cluster must be in the scope of a binding whose
// role allows the write (a create has no name for the authorizer to look
// up, and an update could move an object), and an AccessBinding may be
// written only by an Admin of every cluster it reaches. Users judged by
// a built-in role, administrators and agents are not judged here.
type ScopeAdmission struct {
	Scopes *Scopes
}

var _ admission.ValidationInterface = ScopeAdmission{}

// Handles implements admission.Interface.
func (a ScopeAdmission) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

// Validate implements admission.ValidationInterface.
func (a ScopeAdmission) Validate(_ context.Context, attrs admission.Attributes, _ admission.ObjectInterfaces) error {
	u := attrs.GetUserInfo()
	if u == nil || slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) || attrs.GetResource().Group != api.GroupName {
		return nil
	}
	verb := "create"
	if attrs.GetOperation() == admission.Update {
		verb = "update"
	}
	az := authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: attrs.GetResource().Group, APIVersion: attrs.GetResource().Version,
		Resource: attrs.GetResource().Resource, Subresource: attrs.GetSubresource(), Name: attrs.GetName(), ResourceRequest: true,
	}
	if roleAllows(az) || !a.Scopes.Bound(u) {
		return nil
	}
	obj := attrs.GetObject()
	if b, ok := obj.(*api.AccessBinding); ok {
		if a.Scopes.CanGrant(u, b.Spec.Scope) {
			return nil
		}
		return admission.NewForbidden(attrs, fmt.Errorf("%s may grant access only to clusters they administer (an AccessBinding with role Admin on every cluster of the scope), and this binding's scope reaches further: no one can grant more than they hold", u.GetName()))
	}
	cluster := a.Scopes.objectCluster(obj)
	if a.Scopes.AllowedOn(az, cluster) {
		return nil
	}
	if cluster == "" {
		return admission.NewForbidden(attrs, fmt.Errorf("%s belongs to no cluster, and %s's access bindings reach only their clusters: set spec.cluster to one of them", attrs.GetResource().Resource, u.GetName()))
	}
	return admission.NewForbidden(attrs, fmt.Errorf("%s may not %s %s in cluster %s: their access bindings reach only %s", u.GetName(), verb, attrs.GetResource().Resource, cluster, a.Scopes.describe(a.Scopes.bindingsOf(u))))
}

// objectCluster is the cluster a written object belongs to.
func (s *Scopes) objectCluster(obj runtime.Object) string {
	switch o := obj.(type) {
	case *api.Cluster:
		return o.Name
	case *api.Machine:
		return o.Spec.Cluster
	case *api.MachinePlan:
		c, _ := s.clusterOf("machineplans", o.Name)
		return c
	case *api.MachinePlanSet:
		return o.Spec.Cluster
	case *api.MachinePool:
		return o.Spec.Cluster
	case *api.ClusterRegistrationToken:
		return o.Spec.Cluster
	case *api.ClusterRegistration:
		return o.ClusterName()
	}
	return ""
}

// heldOpen are the subresources whose requests last as long as the user
// keeps them, as a watch does.
var heldOpen = []string{"exec", "portforward", "log", api.ClusterProxySubresource}

// withScopeRevocation ends a scoped user's watch (or exec, port-forward,
// log or cluster proxy request) as soon as a change of their bindings (or
// of a cluster's labels) withdraws the authority it was allowed by: the
// request's context is cancelled, which ends a watch's stream.
func withScopeRevocation(h http.Handler, s *Scopes, judge authorizer.Authorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		u, _ := request.UserFrom(r.Context())
		if !ok || !info.IsResourceRequest || (info.Verb != "watch" && !slices.Contains(heldOpen, info.Subresource)) || !s.Bound(u) {
			h.ServeHTTP(w, r)
			return
		}
		attrs, err := filters.GetAuthorizerAttributes(r.Context())
		if err != nil || roleAllows(attrs) {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		release := s.Hold(attrs, judge, cancel)
		done := func() { release(); cancel() }
		h.ServeHTTP(w, r.WithContext(ctx))
		// A watch served on a routine of its own (APIServingWithRoutine)
		// has only been prepared when the handler returns: it is served
		// by the request's task afterwards, and released after that.
		if routine.AppendTask(ctx, &routine.Task{Func: done}) {
			return
		}
		done()
	})
}
