package apiserver

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// The authorizer is built whole from informers that have not started: it
// reads live until both caches have synced (Ready), then from the caches.
// The live reader here knows no machine, so only the cache can allow m1.
func TestAgentAuthorizerReadsCachesOnceSynced(t *testing.T) {
	client := fake.NewSimpleClientset(&api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", UID: "uid-1"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	v := factory.Muster().V1alpha1()
	a, err := NewAgentAuthorizer(AgentAuthorizerConfig{Live: liveObjects{}, Machines: v.Machines().Informer(), Registrations: v.ClusterRegistrations().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	cn, groups := caller.MachineSubject("m1", "uid-1", "c1")
	readOwn := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: cn, Groups: groups}, Verb: "get", APIGroup: api.GroupName,
		Resource: "machines", Name: "m1", ResourceRequest: true}

	if got, _, _ := a.Authorize(context.Background(), readOwn); got != authorizer.DecisionDeny {
		t.Errorf("before the caches synced: %v, want the live read's answer (deny: the live reader knows no m1)", got)
	}
	select {
	case <-a.Ready():
		t.Fatal("Ready before the informers started")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready did not close once the informers synced")
	}
	if got, reason, _ := a.Authorize(context.Background(), readOwn); got != authorizer.DecisionAllow {
		t.Errorf("after the caches synced: %v (%s), want allow from the cached Machine", got, reason)
	}
}
