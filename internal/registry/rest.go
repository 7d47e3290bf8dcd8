package registry

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// REST is a kind's main resource: the generic store plus kubectl's short
// names and the "muster" category (`kubectl get muster`).
type REST struct {
	*genericregistry.Store
	shortNames []string
}

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories implements rest.CategoriesProvider.
func (r *REST) Categories() []string { return []string{"muster"} }

// StatusREST is a kind's status subresource: get, update and patch only.
type StatusREST struct {
	store *genericregistry.Store
	// lifecycle is the kind's state machine, nil for kinds without one.
	lifecycle *fsm.Definition
	// guard, for the plan kinds, redacts secrets for callers who may not
	// read them (secrets.go).
	guard *secretGuard
}

// New implements rest.Storage.
func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy implements rest.Storage; the main store owns the shared storage.
func (r *StatusREST) Destroy() {}

// Get implements rest.Getter, so that kubectl can read the subresource.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.store.Get(ctx, name, options)
	if err != nil || r.guard == nil {
		return obj, err
	}
	return r.guard.out(ctx, name, obj), nil
}

// Update implements rest.Updater; patches reach it too.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status never creates: an object must exist before it has a status.
	obj, created, err := updateCounted(ctx, r.store, r.lifecycle, name, objInfo, createValidation, updateValidation, options)
	if err != nil || r.guard == nil {
		return obj, created, err
	}
	return r.guard.out(ctx, name, obj), created, nil
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable implements rest.TableConvertor.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// Storage is what the apiserver installs for one kind: "<resource>" and "<resource>/status".
type Storage struct {
	Resource string
	Main     rest.Storage
	Status   *StatusREST
	// store is the main resource's generic store, for kinds whose REST
	// wraps another kind's storage.
	store *genericregistry.Store
}

// NewStorage builds the REST storage of one kind on the given storage options.
func NewStorage[T Object](k Kind[T], typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter) (*Storage, error) {
	return newStorage(k, typer, optsGetter, nil)
}

func newStorage[T Object](k Kind[T], typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter, lastHeard func(string) time.Time) (*Storage, error) {
	info := k.erase()
	main := strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, kind: info}
	status := statusStrategy{strategy: main}

	store := &genericregistry.Store{
		NewFunc:                   info.newFunc,
		NewListFunc:               info.newList,
		PredicateFunc:             info.matcher,
		DefaultQualifiedResource:  v1alpha1.Resource(info.resource),
		SingularQualifiedResource: v1alpha1.Resource(info.singular),
		CreateStrategy:            main,
		UpdateStrategy:            main,
		DeleteStrategy:            main,
		ResetFieldsStrategy:       main,
		TableConvertor:            tableConvertor{kind: info, lastHeard: lastHeard},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: info.attrs}); err != nil {
		return nil, fmt.Errorf("setting up storage for %s: %w", info.resource, err)
	}
	store.Storage.Storage = unavailableStorage{Interface: store.Storage.Storage, resource: info.resource}
	metrics.DatastoreResource(info.resource)
	if info.lifecycle != nil {
		store.AfterCreate = countCreated(info.lifecycle)
	}
	statusStore := *store
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status

	return &Storage{
		Resource: info.resource,
		Main:     &REST{Store: store, shortNames: info.shortNames},
		Status:   &StatusREST{store: &statusStore, lifecycle: info.lifecycle},
		store:    store,
	}, nil
}

func (k kindInfo) attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(Object)
	if !ok {
		return nil, nil, fmt.Errorf("not a %s: %T", k.singular, obj)
	}
	return labels.Set(o.GetLabels()), k.fields(obj), nil
}

func (k kindInfo) matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: k.attrs}
}
