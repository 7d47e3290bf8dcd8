package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
)

// All builds the storage of every muster.io kind.
// newGranter, if set, builds what grants registrations as they are made.
func All(typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter, newGranter NewGranter) ([]*Storage, error) {
	builders := []func() (*Storage, error){
		func() (*Storage, error) { return NewStorage(Cluster, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(ClusterRegistrationToken, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(ClusterRegistration, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(Machine, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(MachinePlan, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(NodePassword, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(ServerEndpoint, typer, optsGetter) },
		func() (*Storage, error) { return NewStorage(ControllerLease, typer, optsGetter) },
	}
	var all []*Storage
	byResource := map[string]*Storage{}
	for _, build := range builders {
		s, err := build()
		if err != nil {
			return nil, err
		}
		all = append(all, s)
		byResource[s.Resource] = s
	}
	// A registration's create verifies the node password against
	// NodePasswords and may grant the request at once.
	objects := newObjects(byResource)
	reg := byResource[ClusterRegistration.Resource]
	rest := &registrationREST{REST: reg.Main.(*REST), objects: objects}
	if newGranter != nil {
		rest.granter = newGranter(objects)
	}
	reg.Main = rest
	return all, nil
}
