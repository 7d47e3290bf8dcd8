package registry

import (
	"context"
	"fmt"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/client-go/tools/cache"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// NewInformerFactory returns an informer factory whose informers of the
// kinds o holds list and watch this server's watch cache in process,
// instead of through client, the loopback client: every change of every
// object the controllers cache would otherwise be encoded as JSON, sent
// over a TLS connection to this same process and decoded again (4% of the
// server's CPU in a registration storm). They behave exactly as client-go's
// (same lists, watches, resource versions and bookmarks). Informers of the
// other kinds go through client, once the API serves.
func NewInformerFactory(o *Objects, client versioned.Interface, options ...informers.SharedInformerOption) informers.SharedInformerFactory {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, options...)
	for _, k := range []struct {
		obj   runtime.Object
		store *genericregistry.Store
	}{
		{&api.Cluster{}, o.clusters},
		{&api.ClusterRegistrationToken{}, o.tokens},
		{&api.ClusterRegistration{}, o.registrations},
		{&api.Machine{}, o.machines},
		{&api.MachinePlan{}, o.plans},
		{&api.NodePassword{}, o.passwords},
		{&api.ServerEndpoint{}, o.endpoints},
		{&api.AccessBinding{}, o.bindings},
	} {
		lw := listWatch(k.store)
		factory.InformerFor(k.obj, func(_ versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(lw, k.obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		})
	}
	return factory
}

func listWatch(s *genericregistry.Store) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			o, err := internalListOptions(opts)
			if err != nil {
				return nil, err
			}
			return s.List(clusterScoped(ctx), o)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			o, err := internalListOptions(opts)
			if err != nil {
				return nil, err
			}
			w, err := s.Watch(clusterScoped(ctx), o)
			if err != nil {
				return nil, err
			}
			// The watch cache hands its watchers a cachingObject (which
			// remembers each event's encodings) around their own copy of
			// the object; an informer stores the object itself.
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if c, ok := ev.Object.(runtime.CacheableObject); ok {
					ev.Object = c.GetObject()
				}
				return ev, true
			}), nil
		},
	}
}

// internalListOptions are an informer's list or watch options as the
// stores take them. Informers use no selectors.
func internalListOptions(o metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	if o.LabelSelector != "" || o.FieldSelector != "" {
		return nil, fmt.Errorf("in-process informers take no selectors (asked for %q, %q)", o.LabelSelector, o.FieldSelector)
	}
	return &metainternalversion.ListOptions{
		ResourceVersion: o.ResourceVersion, ResourceVersionMatch: o.ResourceVersionMatch,
		Limit: o.Limit, Continue: o.Continue,
		Watch: o.Watch, AllowWatchBookmarks: o.AllowWatchBookmarks, SendInitialEvents: o.SendInitialEvents,
		TimeoutSeconds: o.TimeoutSeconds,
	}, nil
}
