package apiserver

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// liveObjects stands in for the server's objects (registry.Objects), which
// the authorizer reads when its caches miss: here it has no caches.
type liveObjects map[string]*api.Machine

func (l liveObjects) Machine(_ context.Context, name string, _ bool) (*api.Machine, error) {
	if m, ok := l[name]; ok {
		return m, nil
	}
	return nil, apierrors.NewNotFound(api.Resource("machines"), name)
}

func (l liveObjects) Registration(_ context.Context, name string, _ bool) (*api.ClusterRegistration, error) {
	return nil, apierrors.NewNotFound(api.Resource("clusterregistrations"), name)
}

// liveAuthorizer is an agent authorizer that reads machines live.
func liveAuthorizer(t *testing.T, machines ...*api.Machine) *AgentAuthorizer {
	t.Helper()
	live := liveObjects{}
	for _, m := range machines {
		live[m.Name] = m
	}
	a, err := NewAgentAuthorizer(AgentAuthorizerConfig{Live: live})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Events are for administrators: what the controllers record names other
// machines, tokens and registrations, so neither a machine's certificate nor
// a join token may read them, and neither may write one (a forged event on
// another machine would mislead an operator).
func TestEventsAreForAdministratorsOnly(t *testing.T) {
	a := liveAuthorizer(t, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", UID: "uid-1"}})
	rules := Authorizer{Rules: []authorizer.AuthorizerFunc{a.Authorize}}

	cn, groups := caller.MachineSubject("m1", "uid-1", "c1")
	machine := &user.DefaultInfo{Name: cn, Groups: groups}
	token := &user.DefaultInfo{Name: caller.BootstrapUser("abcdef"), Groups: []string{caller.BootstrappersGroup}}
	admin := &user.DefaultInfo{Name: "muster-admin", Groups: []string{user.SystemPrivilegedGroup}}

	events := func(u user.Info, verb, namespace string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "", APIVersion: "v1", Resource: "events",
			Namespace: namespace, ResourceRequest: true}
	}
	tests := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"an administrator lists events", events(admin, "list", "default"), authorizer.DecisionAllow},
		{"an administrator lists events in every namespace", events(admin, "list", ""), authorizer.DecisionAllow},
		{"a machine may not list events", events(machine, "list", "default"), authorizer.DecisionDeny},
		{"a machine may not watch events", events(machine, "watch", ""), authorizer.DecisionDeny},
		{"a machine may not create an event", events(machine, "create", "default"), authorizer.DecisionDeny},
		{"a machine may not patch an event", events(machine, "patch", "default"), authorizer.DecisionDeny},
		{"a join token may not list events", events(token, "list", "default"), authorizer.DecisionDeny},
		{"a join token may not create an event", events(token, "create", "default"), authorizer.DecisionDeny},
		{"an anonymous caller may not list events", events(&user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, "list", "default"), authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason, err := rules.Authorize(context.Background(), tt.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("decision %v (%s), want %v", got, reason, tt.want)
			}
			if got == authorizer.DecisionDeny && reason == "" {
				t.Error("a denial must say why")
			}
		})
	}
}

// Reaching a machine: its agent may hold its own tunnel while its Machine
// lives, never exec into any machine; only servers may impersonate (to
// forward a user's exec to the server holding the tunnel).
func TestTunnelAuthorization(t *testing.T) {
	deleting := metav1.Now()
	a := liveAuthorizer(t,
		&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", UID: "uid-1"}},
		&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m2", UID: "uid-2", DeletionTimestamp: &deleting, Finalizers: []string{"x"}}},
	)
	rules := Authorizer{Rules: []authorizer.AuthorizerFunc{a.Authorize}}
	machine := func(name, uid string) user.Info {
		cn, groups := caller.MachineSubject(name, uid, "c1")
		return &user.DefaultInfo{Name: cn, Groups: groups}
	}
	scn, sgroups := caller.ServerSubject("s2")
	server := &user.DefaultInfo{Name: scn, Groups: sgroups}
	operator := &user.DefaultInfo{Name: "otto", Groups: []string{caller.OperatorsGroup}}
	tunnelReq := func(u user.Info, verb string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Path: "/tunnel"}
	}
	exec := func(u user.Info, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: "create", APIGroup: api.GroupName, Resource: "machines", Subresource: "exec", Name: name, ResourceRequest: true}
	}
	impersonate := func(u user.Info) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: "impersonate", Resource: "users", Name: "otto", ResourceRequest: true}
	}
	for _, tt := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"an agent opens its tunnel", tunnelReq(machine("m1", "uid-1"), "post"), authorizer.DecisionAllow},
		{"an agent may only POST it", tunnelReq(machine("m1", "uid-1"), "get"), authorizer.DecisionDeny},
		{"a deleting machine's agent may not", tunnelReq(machine("m2", "uid-2"), "post"), authorizer.DecisionDeny},
		{"a voided certificate may not", tunnelReq(machine("m1", "uid-old"), "post"), authorizer.DecisionDeny},
		{"an operator may not open a tunnel", tunnelReq(operator, "post"), authorizer.DecisionDeny},
		{"an agent never execs, even into itself", exec(machine("m1", "uid-1"), "m1"), authorizer.DecisionDeny},
		{"an operator execs", exec(operator, "m1"), authorizer.DecisionAllow},
		{"a server impersonates to forward", impersonate(server), authorizer.DecisionAllow},
		{"an operator may not impersonate", impersonate(operator), authorizer.DecisionDeny},
		{"an agent may not impersonate", impersonate(machine("m1", "uid-1")), authorizer.DecisionDeny},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, reason, err := rules.Authorize(context.Background(), tt.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("decision %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
}

// A machine whose Machine is not there may ask to rejoin (create a
// ClusterRegistration, which the join's grant judges), and do nothing
// else; one whose name another Machine holds may not even ask.
func TestUnknownMachineMayOnlyAskToRejoin(t *testing.T) {
	a := liveAuthorizer(t, &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "taken", UID: "uid-new"}})
	rules := Authorizer{Rules: []authorizer.AuthorizerFunc{a.Authorize}}
	machine := func(name, uid string) user.Info {
		cn, groups := caller.MachineSubject(name, uid, "c1")
		return &user.DefaultInfo{Name: cn, Groups: groups}
	}
	res := func(u user.Info, verb, resource, sub, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: api.GroupName, Resource: resource, Subresource: sub, Name: name, ResourceRequest: true}
	}
	lost, taken := machine("lost", "uid-lost"), machine("taken", "uid-old")
	for _, tt := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"a lost machine asks to rejoin", res(lost, "create", "clusterregistrations", "", ""), authorizer.DecisionAllow},
		{"a lost machine may not read a registration", res(lost, "get", "clusterregistrations", "", "r1"), authorizer.DecisionDeny},
		{"a lost machine may not read its Machine", res(lost, "get", "machines", "", "lost"), authorizer.DecisionDeny},
		{"a lost machine may not create a Machine", res(lost, "create", "machines", "", ""), authorizer.DecisionDeny},
		{"a lost machine may not write a plan's status", res(lost, "update", "machineplans", "status", "lost"), authorizer.DecisionDeny},
		{"a heartbeat of a lost machine is refused", authorizer.AttributesRecord{User: lost, Verb: "get", Path: api.HeartbeatPath}, authorizer.DecisionDeny},
		{"a certificate of a name another Machine holds may not ask", res(taken, "create", "clusterregistrations", "", ""), authorizer.DecisionDeny},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, reason, err := rules.Authorize(context.Background(), tt.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("decision %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
}
