package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// scopeFixture is two clusters, a and b (b labelled team=b), a machine,
// pool, plan set, token and pending registration in each, and the given
// bindings, in informers fed by a fake clientset.
func scopeFixture(t testing.TB, bindings ...*api.AccessBinding) (*Scopes, Authorizer) {
	t.Helper()
	objs := []runtime.Object{
		&api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"team": "b"}}},
	}
	for _, c := range []string{"a", "b"} {
		objs = append(objs,
			&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m-" + c}, Spec: api.MachineSpec{Cluster: c}},
			&api.MachinePool{ObjectMeta: metav1.ObjectMeta{Name: "pool-" + c}, Spec: api.MachinePoolSpec{Cluster: c}},
			&api.MachinePlanSet{ObjectMeta: metav1.ObjectMeta{Name: "set-" + c}, Spec: api.MachinePlanSetSpec{Cluster: c}},
			&api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "tok-" + c}, Spec: api.ClusterRegistrationTokenSpec{Cluster: c}},
			&api.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "reg-" + c}, Spec: api.ClusterRegistrationSpec{Cluster: c}},
		)
	}
	for _, b := range bindings {
		objs = append(objs, b)
	}
	client := fake.NewSimpleClientset(objs...)
	lastFakeClient = client
	f := informers.NewSharedInformerFactory(client, 0)
	v := f.Muster().V1alpha1()
	s, err := NewScopes(ScopeConfig{
		Bindings: v.AccessBindings().Informer(), Clusters: v.Clusters().Lister(), Machines: v.Machines().Lister(),
		PlanSets: v.MachinePlanSets().Lister(), Pools: v.MachinePools().Lister(), Tokens: v.ClusterRegistrationTokens().Lister(),
		Registrations: v.ClusterRegistrations().Lister(), ClusterEvents: v.Clusters().Informer(),
		Synced: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	for typ, ok := range f.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	// The first objects' notifications are behind us: a later recheck is
	// the test's own change.
	if !cache.WaitForCacheSync(stop, s.HandlersSynced) {
		t.Fatal("the scopes' handlers did not sync")
	}
	return s, Authorizer{Scopes: s}
}

// lastFakeClient is the clientset of the last fixture, for tests that
// change objects under its informers.
var lastFakeClient *fake.Clientset

func binding(name string, role api.AccessRole, scope api.AccessScope, subjects ...api.AccessSubject) *api.AccessBinding {
	return &api.AccessBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.AccessBindingSpec{Role: role, Scope: scope, Subjects: subjects}}
}

func group(name string) api.AccessSubject {
	return api.AccessSubject{Kind: api.AccessGroup, Name: name}
}

type scopeReq struct {
	verb, resource, sub, name, selector string
	group                               string
}

func (r scopeReq) attrs(u user.Info) authorizer.AttributesRecord {
	g := api.GroupName
	if r.resource == "events" {
		g = ""
	}
	a := authorizer.AttributesRecord{User: u, Verb: r.verb, APIGroup: g, Resource: r.resource, Subresource: r.sub, Name: r.name, ResourceRequest: true}
	if r.selector != "" {
		sel, err := fields.ParseSelector(r.selector)
		if err != nil {
			panic(err)
		}
		a.FieldSelectorRequirements = sel.Requirements()
	}
	return a
}

// TestScopedAuthorizer: team a's operators reach cluster a's objects and
// nothing of cluster b's, by name, by selector, and through subresources;
// a list without a selector is refused saying how to select.
func TestScopedAuthorizer(t *testing.T) {
	_, a := scopeFixture(t,
		binding("team-a", api.AccessOperator, api.AccessScope{Clusters: []string{"a"}}, group("team-a")),
		binding("team-b-view", api.AccessViewer, api.AccessScope{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}, group("team-b")),
	)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a", user.AllAuthenticated}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"team-b", user.AllAuthenticated}}
	tests := []struct {
		who   user.Info
		req   scopeReq
		allow bool
		// why is what a refusal must say.
		why string
	}{
		{alice, scopeReq{verb: "get", resource: "machines", name: "m-a"}, true, ""},
		{alice, scopeReq{verb: "get", resource: "machines", name: "m-b"}, false, "only in clusters a"},
		{alice, scopeReq{verb: "get", resource: "machines", name: "absent"}, false, "no such object"},
		{alice, scopeReq{verb: "list", resource: "machines"}, false, "--field-selector spec.cluster=NAME"},
		{alice, scopeReq{verb: "list", resource: "machines", selector: "spec.cluster=a"}, true, ""},
		{alice, scopeReq{verb: "watch", resource: "machines", selector: "spec.cluster=b"}, false, "cluster b"},
		{alice, scopeReq{verb: "list", resource: "machines", selector: "spec.cluster!=b"}, false, "--field-selector"},
		{alice, scopeReq{verb: "list", resource: "machines", selector: "spec.cluster=a,spec.cluster=b"}, true, ""}, // ANDed: selects nothing of b
		{alice, scopeReq{verb: "patch", resource: "machines", name: "m-b"}, false, "cluster b"},
		{alice, scopeReq{verb: "delete", resource: "machines", name: "m-a"}, true, ""},
		{alice, scopeReq{verb: "create", resource: "machines", sub: "exec", name: "m-b"}, false, "cluster b"},
		{alice, scopeReq{verb: "create", resource: "machines", sub: "exec", name: "m-a"}, true, ""},
		{alice, scopeReq{verb: "get", resource: "machines", sub: "log", name: "m-b"}, false, ""},
		{alice, scopeReq{verb: "get", resource: "machines", sub: "history", name: "m-b"}, false, ""},
		{alice, scopeReq{verb: "get", resource: "machineplans", name: "m-b"}, false, ""},
		{alice, scopeReq{verb: "list", resource: "machineplans", selector: "metadata.name=m-a"}, true, ""},
		{alice, scopeReq{verb: "list", resource: "machineplans", selector: "metadata.name=m-b"}, false, ""},
		{alice, scopeReq{verb: "update", resource: "clusterregistrations", sub: "status", name: "reg-b"}, false, ""},
		{alice, scopeReq{verb: "update", resource: "clusterregistrations", sub: "status", name: "reg-a"}, true, ""},
		{alice, scopeReq{verb: "get", resource: "clusterregistrationtokens", name: "tok-b"}, false, ""},
		{alice, scopeReq{verb: "list", resource: "clusterregistrationtokens", selector: "spec.cluster=a"}, true, ""},
		{alice, scopeReq{verb: "get", resource: "clusters", sub: "proxy", name: "b"}, false, ""},
		{alice, scopeReq{verb: "create", resource: "clusters", sub: "proxy", name: "a"}, true, ""},
		{alice, scopeReq{verb: "list", resource: "clusters"}, false, "metadata.name=NAME"},
		{alice, scopeReq{verb: "list", resource: "events", selector: "involvedObject.kind=Machine,involvedObject.name=m-b"}, false, ""},
		{alice, scopeReq{verb: "list", resource: "events", selector: "involvedObject.kind=Machine,involvedObject.name=m-a"}, true, ""},
		{alice, scopeReq{verb: "list", resource: "events"}, false, "involvedObject.kind"},
		{alice, scopeReq{verb: "get", resource: "machinepools", name: "pool-b"}, false, ""},
		{alice, scopeReq{verb: "get", resource: "machineplansets", name: "set-b"}, false, ""},
		{alice, scopeReq{verb: "get", resource: "nodepasswords", name: "m-a"}, false, "system:masters"},
		{alice, scopeReq{verb: "get", resource: "serverendpoints", name: "s1"}, false, "belongs to no cluster"},
		{alice, scopeReq{verb: "create", resource: "accessbindings"}, false, ""},
		{alice, scopeReq{verb: "delete", resource: "clusters", name: "a"}, false, ""}, // an operator, not an admin
		// Bob's scope is a label selector.
		{bob, scopeReq{verb: "get", resource: "machines", name: "m-b"}, true, ""},
		{bob, scopeReq{verb: "get", resource: "machines", name: "m-a"}, false, "labelled team=b"},
		{bob, scopeReq{verb: "patch", resource: "machines", name: "m-b"}, false, ""}, // a viewer
		{bob, scopeReq{verb: "get", resource: "machineplans", sub: "secrets", name: "m-b"}, false, ""},
	}
	for _, tt := range tests {
		d, why, err := a.Authorize(context.Background(), tt.req.attrs(tt.who))
		if err != nil {
			t.Fatal(err)
		}
		if got := d == authorizer.DecisionAllow; got != tt.allow {
			t.Errorf("%s %+v: allowed %v, want %v (%s)", tt.who.GetName(), tt.req, got, tt.allow, why)
		}
		if !tt.allow && !strings.Contains(why, tt.why) {
			t.Errorf("%s %+v: refusal %q does not say %q", tt.who.GetName(), tt.req, why, tt.why)
		}
	}
	// A user without bindings is judged as before: by the built-in roles.
	none := &user.DefaultInfo{Name: "vera", Groups: []string{caller.ViewersGroup}}
	if d, _, _ := a.Authorize(context.Background(), scopeReq{verb: "list", resource: "machines"}.attrs(none)); d != authorizer.DecisionAllow {
		t.Errorf("a built-in viewer may no longer list machines without a selector")
	}
}

// TestScopeEscalation: an Admin of cluster a grants access to a alone;
// a binding reaching b, all clusters, or a selector they do not hold is
// refused.
func TestScopeEscalation(t *testing.T) {
	s, _ := scopeFixture(t, binding("a-admin", api.AccessAdmin, api.AccessScope{Clusters: []string{"a"}}, group("team-a")))
	admin := &user.DefaultInfo{Name: "ada", Groups: []string{"team-a"}}
	for _, tt := range []struct {
		scope api.AccessScope
		ok    bool
	}{
		{api.AccessScope{Clusters: []string{"a"}}, true},
		{api.AccessScope{Clusters: []string{"a", "b"}}, false},
		{api.AccessScope{AllClusters: true}, false},
		{api.AccessScope{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}, false},
	} {
		if got := s.CanGrant(admin, tt.scope); got != tt.ok {
			t.Errorf("admin of a granting %+v: %v, want %v", tt.scope, got, tt.ok)
		}
	}
}

// TestScopeRevocation: an open request is ended once the binding that
// allowed it is gone.
func TestScopeRevocation(t *testing.T) {
	s, a := scopeFixture(t, binding("team-a", api.AccessViewer, api.AccessScope{Clusters: []string{"a"}}, group("team-a")))
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a"}}
	attrs := scopeReq{verb: "watch", resource: "machines", selector: "spec.cluster=a"}.attrs(alice)
	if d, why, _ := a.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
		t.Fatalf("watch refused: %s", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer s.Hold(attrs, authorizer.AuthorizerFunc(a.Authorize), cancel)()
	if err := s.bindings.Delete(binding("team-a", "", api.AccessScope{})); err != nil {
		t.Fatal(err)
	}
	s.recheck() // what the informer's handler does on a delete
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch was not ended when its binding was deleted")
	}
}

// TestScopeRevocationByClusterLabels: a user scoped by a cluster label
// selector loses an open watch as soon as the cluster's label changes,
// through the informers as on the server.
func TestScopeRevocationByClusterLabels(t *testing.T) {
	s, a := scopeFixture(t, binding("team-b-view", api.AccessViewer,
		api.AccessScope{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}, group("team-b")))
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"team-b"}}
	attrs := scopeReq{verb: "watch", resource: "machines", selector: "spec.cluster=b"}.attrs(bob)
	if d, why, _ := a.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
		t.Fatalf("watch refused: %s", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer s.Hold(attrs, authorizer.AuthorizerFunc(a.Authorize), cancel)()
	clusters := lastFakeClient.MusterV1alpha1().Clusters()
	c, err := clusters.Get(context.Background(), "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Labels = map[string]string{"team": "a"}
	if _, err := clusters.Update(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not ended when its cluster left the binding's selector")
	}
	if d, _, _ := a.Authorize(context.Background(), attrs); d == authorizer.DecisionAllow {
		t.Fatal("a new watch is still allowed after the cluster left the selector")
	}
}

// BenchmarkScopedAuthorize is the authorizer's cost per request of a
// scoped user (one binding of their own) beside 0 and 1,000 bindings of
// other teams, for a get by name and a list by selector; of a built-in
// viewer, whom bindings must not slow; and, as the baseline, of that
// viewer on the authorizer without scopes (as before AccessBindings).
func BenchmarkScopedAuthorize(b *testing.B) {
	vera := &user.DefaultInfo{Name: "vera", Groups: []string{caller.ViewersGroup, user.AllAuthenticated}}
	b.Run("no-scopes/builtin-viewer-list", func(b *testing.B) {
		b.ReportAllocs()
		a, attrs := Authorizer{}, scopeReq{verb: "list", resource: "machines"}.attrs(vera)
		for i := 0; i < b.N; i++ {
			if d, why, _ := a.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
				b.Fatal(why)
			}
		}
	})
	for _, n := range []int{0, 1000} {
		bs := []*api.AccessBinding{binding("team-a", api.AccessOperator, api.AccessScope{Clusters: []string{"a"}}, group("team-a"))}
		for i := 0; i < n; i++ {
			bs = append(bs, binding(fmt.Sprintf("other-%d", i), api.AccessOperator, api.AccessScope{Clusters: []string{fmt.Sprintf("c%d", i)}}, group(fmt.Sprintf("team-%d", i))))
		}
		_, a := scopeFixture(b, bs...)
		alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a", user.AllAuthenticated}}
		for _, c := range []struct {
			name string
			a    authorizer.AttributesRecord
		}{
			{"scoped-get", scopeReq{verb: "get", resource: "machines", name: "m-a"}.attrs(alice)},
			{"scoped-list", scopeReq{verb: "list", resource: "machines", selector: "spec.cluster=a"}.attrs(alice)},
			{"builtin-viewer-list", scopeReq{verb: "list", resource: "machines"}.attrs(vera)},
		} {
			b.Run(fmt.Sprintf("other-bindings=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if d, why, _ := a.Authorize(context.Background(), c.a); d != authorizer.DecisionAllow {
						b.Fatal(why)
					}
				}
			})
		}
	}
}
