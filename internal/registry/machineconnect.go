package registry

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// MachineConnector reaches a machine through its agent (internal/tunnel's
// Hub): it serves one request of a connect subresource for m. An error is
// returned before anything was written.
type MachineConnector interface {
	Connect(subresource string, m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) error
}

// MachineConnectREST is one of a Machine's connect subresources
// (machines/exec, machines/portforward, machines/log): authorized like any
// verb on machines/<subresource>, then served through the agent's tunnel.
type MachineConnectREST struct {
	machines    rest.Getter
	subresource string
	methods     []string
	connector   MachineConnector
}

var _ rest.Connecter = &MachineConnectREST{}

// MachineConnectStorages are the connect subresources of machines, keyed
// as the apiserver installs them ("machines/exec", ...).
func MachineConnectStorages(machines rest.Getter, c MachineConnector) map[string]rest.Storage {
	out := map[string]rest.Storage{}
	for sub, methods := range map[string][]string{
		// POST, as kubectl exec and port-forward: their verb is create,
		// which is what the built-in roles grant operators.
		"exec":        {http.MethodPost},
		"portforward": {http.MethodPost},
		"log":         {http.MethodGet},
	} {
		out[Machine.Resource+"/"+sub] = &MachineConnectREST{machines: machines, subresource: sub, methods: methods, connector: c}
	}
	return out
}

// New implements rest.Storage.
func (r *MachineConnectREST) New() runtime.Object { return &api.Machine{} }

// Destroy implements rest.Storage.
func (r *MachineConnectREST) Destroy() {}

// NewConnectOptions implements rest.Connecter: the handler reads its
// query parameters (command=, port=) itself.
func (r *MachineConnectREST) NewConnectOptions() (runtime.Object, bool, string) {
	return nil, false, ""
}

// ConnectMethods implements rest.Connecter.
func (r *MachineConnectREST) ConnectMethods() []string { return r.methods }

// Connect implements rest.Connecter. An unknown Machine is 404; one being
// deleted is 409, since its agent is going away with it.
func (r *MachineConnectREST) Connect(ctx context.Context, name string, _ runtime.Object, responder rest.Responder) (http.Handler, error) {
	obj, err := r.machines.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m, ok := obj.(*api.Machine)
	if !ok {
		return nil, fmt.Errorf("machine %s: unexpected object %T", name, obj)
	}
	if m.DeletionTimestamp != nil || m.Status.Phase == api.MachinePhaseDeleting || m.Status.Phase == api.MachinePhaseDeleted {
		return nil, apierrors.NewConflict(api.Resource(Machine.Resource), name, fmt.Errorf(
			"machine %s is being deleted (phase %s): its agent is no longer reachable through the server", name, m.Status.Phase))
	}
	who, ok := request.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := r.connector.Connect(r.subresource, m, who, w, req); err != nil {
			responder.Error(err)
		}
	}), nil
}
