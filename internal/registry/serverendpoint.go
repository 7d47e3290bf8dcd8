package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// ServerEndpoint is the storage description of live servers' addresses.
var ServerEndpoint = Kind[*api.ServerEndpoint]{
	Resource:       "serverendpoints",
	Singular:       "serverendpoint",
	ShortNames:     []string{"sep"},
	New:            func() *api.ServerEndpoint { return &api.ServerEndpoint{} },
	NewList:        func() runtime.Object { return &api.ServerEndpointList{} },
	Fields:         api.ServerEndpointFields,
	Validate:       validation.ValidateServerEndpoint,
	ValidateStatus: validation.ValidateServerEndpointStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Address", Type: "string", Description: "Advertised host:port of the server."},
		{Name: "Renewed", Type: "string", Description: "When the server last renewed the endpoint."},
	},
	Cells: func(e *api.ServerEndpoint) []interface{} {
		return []interface{}{e.Spec.Address, since(e.Status.RenewTime)}
	},
}
