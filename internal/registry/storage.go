package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
)

// All builds the storage of every muster.io kind, and the server's own
// in-process access to them.
func All(typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter) ([]*Storage, *Objects, error) {
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
			return nil, nil, err
		}
		all = append(all, s)
		byResource[s.Resource] = s
	}
	// A Cluster is deleted only once it has no Machines (clusterdelete.go).
	clusters := byResource[Cluster.Resource]
	clusters.Main = &clusterREST{REST: clusters.Main.(*REST), machines: byResource[Machine.Resource].store}
	return all, newObjects(byResource), nil
}
