package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
)

// TestAdvertisedURL: the install command token create prints names the
// address agents reach, not the loopback address the admin kubeconfig of a
// server started with no flags names.
func TestAdvertisedURL(t *testing.T) {
	now := metav1.Now()
	stale := metav1.NewTime(time.Now().Add(-time.Hour))
	endpoint := func(name, address string, renewed *metav1.Time) *api.ServerEndpoint {
		return &api.ServerEndpoint{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.ServerEndpointSpec{Address: address},
			Status: api.ServerEndpointStatus{RenewTime: renewed, LeaseDurationSeconds: 15}}
	}
	for _, tc := range []struct {
		name       string
		kubeconfig string
		endpoints  []runtime.Object
		want       string
	}{
		{"a routable kubeconfig server as it is", "https://10.0.0.2:9443", []runtime.Object{endpoint("a", "10.0.0.9:9443", &now)}, "https://10.0.0.2:9443"},
		{"loopback, and the server advertises loopback (make run)", "https://127.0.0.1:9443", []runtime.Object{endpoint("a", "127.0.0.1:9443", &now)}, "https://127.0.0.1:9443"},
		{"loopback, the server advertises its IP", "https://127.0.0.1:9443/", []runtime.Object{endpoint("a", "10.0.0.2:9443", &now)}, "https://10.0.0.2:9443"},
		{"the server on the kubeconfig's port first", "https://127.0.0.1:9443", []runtime.Object{endpoint("a", "10.0.0.1:9444", &now), endpoint("b", "10.0.0.3:9443", &now)}, "https://10.0.0.3:9443"},
		{"a lapsed endpoint is no server", "https://localhost:9443", []runtime.Object{endpoint("a", "10.0.0.2:9443", &stale)}, "https://localhost:9443"},
		{"no endpoints", "https://127.0.0.1:9443", nil, "https://127.0.0.1:9443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := advertisedURL(context.Background(), fake.NewSimpleClientset(tc.endpoints...), tc.kubeconfig); got != tc.want {
				t.Errorf("advertisedURL(%s) = %s, want %s", tc.kubeconfig, got, tc.want)
			}
		})
	}
}
