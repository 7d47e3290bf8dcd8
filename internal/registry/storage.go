package registry

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// All builds the storage of every muster.io kind, and the server's own
// in-process access to them. lastHeard, if not nil, is when a machine's
// agent was last heard by any server, kept in memory by the server: the
// machines table shows it rather than the coarsely persisted lastSeen.
// drivers, if not nil, checks each MachinePool's driverConfig against its
// driver's schema at admission (pooladmission.go).
func All(typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter, lastHeard func(machine string) time.Time, drivers validation.DriverSchemas) ([]*Storage, *Objects, error) {
	builders := []func() (*Storage, error){
		func() (*Storage, error) { return newStorage(Cluster, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(ClusterRegistrationToken, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(ClusterRegistration, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(Machine, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(MachinePlan, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(NodePassword, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(ServerEndpoint, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(ControllerLease, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(MachinePool, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(MachinePlanSet, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(AccessBinding, typer, optsGetter, lastHeard) },
		func() (*Storage, error) { return newStorage(NotificationSubscription, typer, optsGetter, lastHeard) },
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
	// A deleted Cluster's Machines are deleted with it: its finalizer
	// (cluster.go) holds it until internal/lifecycle has done so.
	if drivers != nil {
		pools := byResource[MachinePool.Resource]
		pools.Main = &poolREST{REST: pools.Main.(*REST), drivers: drivers}
	}
	return all, newObjects(byResource), nil
}
