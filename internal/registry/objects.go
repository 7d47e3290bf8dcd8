package registry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Objects is the server's own access to its objects, in process: the calls
// go straight to the registry's stores, with no HTTP, no encoding and no
// authorization, because the caller is the server itself. The strategies
// still run, so every object is validated exactly as an API write is.
//
// It exists for the join (internal/join), which writes several objects per
// joining agent, and the lifecycle controller: through the loopback client
// each write would cost a TLS round trip and two JSON encodings more than the
// datastore write itself. It decides nothing: it is storage.
//
// Reads come from the watch cache unless fresh is asked for; creates may
// carry the status the server decided (a Machine an agent registered starts
// Registering), which no API client can do.
type Objects struct {
	tokens, machines, plans, clusters, passwords *genericregistry.Store
	registrations, endpoints, bindings           *genericregistry.Store
	tokenStatus, passwordStatus, machineStatus   *StatusREST
	registrationStatus                           *StatusREST
}

func newObjects(byResource map[string]*Storage) *Objects {
	return &Objects{
		tokens:         byResource[ClusterRegistrationToken.Resource].store,
		machines:       byResource[Machine.Resource].store,
		plans:          byResource[MachinePlan.Resource].store,
		clusters:       byResource[Cluster.Resource].store,
		passwords:      byResource[NodePassword.Resource].store,
		registrations:  byResource[ClusterRegistration.Resource].store,
		endpoints:      byResource[ServerEndpoint.Resource].store,
		bindings:       byResource[AccessBinding.Resource].store,
		tokenStatus:    byResource[ClusterRegistrationToken.Resource].Status,
		passwordStatus: byResource[NodePassword.Resource].Status,
		machineStatus:  byResource[Machine.Resource].Status,

		registrationStatus: byResource[ClusterRegistration.Resource].Status,
	}
}

// Token reads a join token, from the watch cache unless fresh.
func (o *Objects) Token(ctx context.Context, name string, fresh bool) (*api.ClusterRegistrationToken, error) {
	return get[*api.ClusterRegistrationToken](ctx, o.tokens, name, fresh)
}

// Machine reads a Machine, from the watch cache unless fresh.
func (o *Objects) Machine(ctx context.Context, name string, fresh bool) (*api.Machine, error) {
	return get[*api.Machine](ctx, o.machines, name, fresh)
}

// Cluster reads a Cluster, from the watch cache unless fresh.
func (o *Objects) Cluster(ctx context.Context, name string, fresh bool) (*api.Cluster, error) {
	return get[*api.Cluster](ctx, o.clusters, name, fresh)
}

// Plan reads a MachinePlan, from the watch cache unless fresh.
func (o *Objects) Plan(ctx context.Context, name string, fresh bool) (*api.MachinePlan, error) {
	return get[*api.MachinePlan](ctx, o.plans, name, fresh)
}

// Password reads a NodePassword, from the watch cache unless fresh.
func (o *Objects) Password(ctx context.Context, name string, fresh bool) (*api.NodePassword, error) {
	return get[*api.NodePassword](ctx, o.passwords, name, fresh)
}

// Registration reads a ClusterRegistration, from the watch cache unless fresh.
func (o *Objects) Registration(ctx context.Context, name string, fresh bool) (*api.ClusterRegistration, error) {
	return get[*api.ClusterRegistration](ctx, o.registrations, name, fresh)
}

// MachinesOfClient lists the Machines registered by the agent with clientID,
// from the watch cache.
func (o *Objects) MachinesOfClient(ctx context.Context, clientID string) ([]api.Machine, error) {
	list, err := o.machines.List(clusterScoped(ctx), &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	var out []api.Machine
	for _, m := range list.(*api.MachineList).Items {
		if m.Spec.ClientID == clientID {
			out = append(out, m)
		}
	}
	return out, nil
}

// MachinesWithRole lists, from the watch cache, the Machines of cluster
// that have role (their role.muster.io/<role> label, which the server
// keeps equal to spec.roles), for the proxy of the cluster's API.
func (o *Objects) MachinesWithRole(ctx context.Context, cluster, role string) ([]api.Machine, error) {
	sel := labels.SelectorFromSet(labels.Set{api.RoleLabelPrefix + role: "true"})
	list, err := o.machines.List(clusterScoped(ctx), &metainternalversion.ListOptions{ResourceVersion: "0", LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var out []api.Machine
	for _, m := range list.(*api.MachineList).Items {
		if m.Spec.Cluster == cluster && slices.Contains(m.Spec.Roles, role) {
			out = append(out, m)
		}
	}
	return out, nil
}

// CreatePassword stores a NodePassword with the status the server decided
// (bound to its Machine).
func (o *Objects) CreatePassword(ctx context.Context, np *api.NodePassword) (*api.NodePassword, error) {
	return create(ctx, o.passwords, np)
}

// UpdateRegistrationStatus applies change to the stored registration's
// status through the status strategy (its state-machine check and history).
func (o *Objects) UpdateRegistrationStatus(ctx context.Context, name string, change func(*api.ClusterRegistration) bool) (*api.ClusterRegistration, error) {
	return updateStatus(ctx, o.registrationStatus, name, change)
}

// DeleteRegistration deletes a registration.
func (o *Objects) DeleteRegistration(ctx context.Context, name string) error {
	_, _, err := o.registrations.Delete(clusterScoped(ctx), name, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{})
	return err
}

// UseToken counts one registration against a join token whose uses are
// limited, in the same compare-and-swap that checks the limit, so that two
// servers granting at once never pass it together. ok is false, and nothing
// is written, when the token has no use left.
func (o *Objects) UseToken(ctx context.Context, name string, maxUses int32) (ok bool, err error) {
	_, err = updateStatus(ctx, o.tokenStatus, name, func(t *api.ClusterRegistrationToken) bool {
		if ok = t.Status.Registrations < maxUses; !ok {
			return false
		}
		now := nowFunc()
		t.Status.Registrations++
		t.Status.LastUsed = &now
		return true
	})
	return ok, err
}

// RegisterMachine creates the Machine of an agent that has just registered:
// a custom machine starts Registering (SPEC §6.5), its history saying so.
func (o *Objects) RegisterMachine(ctx context.Context, m *api.Machine) (*api.Machine, error) {
	if err := startAt(fsm.Machine, m, "AgentRegistered", fsm.EventRegister); err != nil {
		return nil, err
	}
	return create(ctx, o.machines, m)
}

// MarkRegistering moves a Machine that waited for its agent (Pending or
// Provisioning) to Registering, through the status strategy's checks.
func (o *Objects) MarkRegistering(ctx context.Context, name string) (*api.Machine, error) {
	return updateStatus(ctx, o.machineStatus, name, func(m *api.Machine) bool {
		if m.Status.Phase != api.MachinePhasePending && m.Status.Phase != api.MachinePhaseProvisioning {
			return false
		}
		m.Status.Phase, m.Status.Reason = api.MachinePhaseRegistering, "AgentRegistered"
		return true
	})
}

// UpdateMachineStatus applies change to the stored Machine's status (the
// status strategy checks and records a phase change); a change that
// returns false writes nothing.
func (o *Objects) UpdateMachineStatus(ctx context.Context, name string, change func(*api.Machine) bool) (*api.Machine, error) {
	return updateStatus(ctx, o.machineStatus, name, change)
}

// EnsureCluster creates c unless a Cluster of its name exists.
func (o *Objects) EnsureCluster(ctx context.Context, c *api.Cluster) error {
	return ignoreExists(create(ctx, o.clusters, c))
}

// EnsurePlan creates p unless a MachinePlan of its name exists.
func (o *Objects) EnsurePlan(ctx context.Context, p *api.MachinePlan) error {
	return ignoreExists(create(ctx, o.plans, p))
}

// CountTokenUses adds n registrations to a join token's status.
func (o *Objects) CountTokenUses(ctx context.Context, name string, n int) error {
	_, err := updateStatus(ctx, o.tokenStatus, name, func(t *api.ClusterRegistrationToken) bool {
		now := nowFunc()
		t.Status.Registrations += int32(n)
		t.Status.LastUsed = &now
		return true
	})
	return err
}

// BindPassword records that a node password belongs to the Machine of its
// node name, and that a registration has just presented it.
func (o *Objects) BindPassword(ctx context.Context, node string) error {
	_, err := updateStatus(ctx, o.passwordStatus, node, func(np *api.NodePassword) bool {
		now := nowFunc()
		np.Status.Machine, np.Status.LastVerified = node, &now
		return true
	})
	return err
}

// serverWrite marks a context whose creates keep the status they carry.
type serverWrite struct{}

func asServer(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverWrite{}, true)
}

// AsServer marks a create made by the server's own code on behalf of a
// request (the join's registration create): it keeps the status the server
// decided, which an API client's create never does.
func AsServer(ctx context.Context) context.Context { return asServer(ctx) }

// StartAt gives obj, a new object of a lifecycle kind, the status of having
// taken events from the initial state, each recorded as a transition.
func StartAt(def *fsm.Definition, obj runtime.Object, reason string, events ...string) error {
	return startAt(def, obj, reason, events...)
}

func isServerWrite(ctx context.Context) bool { v, _ := ctx.Value(serverWrite{}).(bool); return v }

// startAt gives a new object of a lifecycle kind the status of having taken
// events from its initial state, each recorded as a transition, so that a
// server-made object's history is legal by construction.
func startAt(def *fsm.Definition, obj runtime.Object, reason string, events ...string) error {
	state := def.Initial()
	var history []api.Transition
	for _, event := range events {
		to, err := def.Fire(state, event)
		if err != nil {
			return err
		}
		history = append(history, api.Transition{From: state, To: to, Event: event, Reason: reason, Time: nowFunc(),
			Seq: int64(len(history)) + 1, By: "muster-server"})
		state = to
	}
	setPhase(obj, state)
	setField(obj, "Status.Reason", reflect.ValueOf(reason))
	setField(obj, "Status.Transitions", reflect.ValueOf(history))
	return nil
}

func get[T runtime.Object](ctx context.Context, s *genericregistry.Store, name string, fresh bool) (T, error) {
	var zero T
	opts := &metav1.GetOptions{ResourceVersion: "0"}
	if fresh {
		opts.ResourceVersion = ""
	}
	obj, err := s.Get(clusterScoped(ctx), name, opts)
	if err != nil {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("registry: %s is a %T", name, obj)
	}
	return t, nil
}

func create[T runtime.Object](ctx context.Context, s *genericregistry.Store, obj T) (T, error) {
	var zero T
	out, err := s.Create(asServer(clusterScoped(ctx)), obj, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		return zero, err
	}
	return out.(T), nil
}

// updateStatus applies change to the stored object's status, retrying on
// conflicts against the fresh object as every compare-and-swap does, and
// returns the object stored. A change that returns false leaves the object
// as it is, unwritten.
func updateStatus[T runtime.Object](ctx context.Context, s *StatusREST, name string, change func(T) bool) (T, error) {
	var zero T
	obj, _, err := s.Update(clusterScoped(ctx), name, rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject().(T)
		if !change(obj) {
			return nil, unchanged{old}
		}
		return obj, nil
	}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	var u unchanged
	if errors.As(err, &u) {
		return u.stored.(T), nil
	}
	if err != nil {
		return zero, err
	}
	return obj.(T), nil
}

// unchanged ends an update that has nothing to write.
type unchanged struct{ stored runtime.Object }

func (unchanged) Error() string { return "nothing to change" }

// clusterScoped gives calls made outside any request the (empty) namespace
// the stores look for: every muster.io kind is cluster-scoped.
func clusterScoped(ctx context.Context) context.Context {
	return request.WithNamespace(ctx, metav1.NamespaceNone)
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
