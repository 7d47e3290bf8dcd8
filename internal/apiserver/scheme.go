package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/muster-io/muster/internal/events"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

var (
	// Scheme holds the muster.io types as v1alpha1 and as the internal version.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes through Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)

	// externalScheme has only the versioned types. OpenAPI names are built
	// from it: with the internal registration in the way the namer would
	// name the schemas "__internal".
	externalScheme = runtime.NewScheme()
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, v1alpha1.AddToSchemeAsInternal} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
	if err := v1alpha1.AddToScheme(externalScheme); err != nil {
		panic(err)
	}
	// core/v1 Events only, so that kubectl get events and kubectl describe
	// find what the controllers record (internal/events).
	for _, add := range []func(*runtime.Scheme) error{events.AddToScheme, events.AddToSchemeAsInternal} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
	if err := events.AddToScheme(externalScheme); err != nil {
		panic(err)
	}
	// Options and status types every API server serves alongside its group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}
