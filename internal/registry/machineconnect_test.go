package registry

import (
	"context"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

type machineGetter map[string]*api.Machine

func (g machineGetter) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if m, ok := g[name]; ok {
		return m, nil
	}
	return nil, apierrors.NewNotFound(api.Resource("machines"), name)
}

type connector struct{ called string }

func (c *connector) Connect(sub string, m *api.Machine, _ user.Info, _ http.ResponseWriter, _ *http.Request) error {
	c.called = sub + " " + m.Name
	return nil
}

// A machine that is unknown is a 404, one being deleted a 409: neither
// reaches the tunnel.
func TestMachineConnect(t *testing.T) {
	now := metav1.Now()
	machines := machineGetter{
		"up":       {ObjectMeta: metav1.ObjectMeta{Name: "up"}, Status: api.MachineStatus{Phase: api.MachinePhaseRunning}},
		"deleting": {ObjectMeta: metav1.ObjectMeta{Name: "deleting", DeletionTimestamp: &now}, Status: api.MachineStatus{Phase: api.MachinePhaseDraining}},
		"deleted":  {ObjectMeta: metav1.ObjectMeta{Name: "deleted"}, Status: api.MachineStatus{Phase: api.MachinePhaseDeleted}},
	}
	c := &connector{}
	exec := MachineConnectStorages(machines, c)["machines/exec"].(rest.Connecter)
	ctx := request.WithUser(context.Background(), &user.DefaultInfo{Name: "otto"})
	for _, tc := range []struct {
		name string
		code int32
		says string
	}{
		{"nope", 404, "not found"},
		{"deleting", 409, "is being deleted"},
		{"deleted", 409, "is being deleted"},
	} {
		_, err := exec.Connect(ctx, tc.name, nil, nil)
		if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != tc.code || !strings.Contains(status.Status().Message, tc.says) {
			t.Errorf("Connect(%s) = %v; want %d saying %q", tc.name, err, tc.code, tc.says)
		}
	}
	h, err := exec.Connect(ctx, "up", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.ServeHTTP(nil, nil)
	if c.called != "exec up" {
		t.Errorf("the connector was called with %q", c.called)
	}
	if m := exec.ConnectMethods(); len(m) != 1 || m[0] != http.MethodPost {
		t.Errorf("exec methods %v, want POST (create, as kubectl exec)", m)
	}
}
