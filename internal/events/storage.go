package events

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
)

// DefaultTTL is how long an Event is kept after its last write, as
// kube-apiserver's --event-ttl: events say what happened lately, and a
// flapping fleet must not fill the datastore with them.
const DefaultTTL = time.Hour

// Bounds of what a writer may put in an Event; the recorder's messages are short.
const (
	maxMessageBytes = 4096
	maxReasonBytes  = 128
)

// NewStorage is the events resource: a generic store whose every write
// carries a TTL, so the datastore drops an event ttl after its last
// update (kine and etcd expire keys with leases). codec encodes core/v1
// for storage; muster's own codec knows only its group.
func NewStorage(typer runtime.ObjectTyper, optsGetter generic.RESTOptionsGetter, codec runtime.Codec, ttl time.Duration) (*genericregistry.Store, error) {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	seconds := uint64(ttl.Seconds())
	if seconds == 0 {
		seconds = 1
	}
	s := strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Event{} },
		NewListFunc:               func() runtime.Object { return &corev1.EventList{} },
		PredicateFunc:             matcher,
		DefaultQualifiedResource:  corev1.Resource("events"),
		SingularQualifiedResource: corev1.Resource("event"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		TableConvertor:            table{},
		TTLFunc: func(runtime.Object, uint64, bool) (uint64, error) {
			return seconds, nil
		},
	}
	getter := codecGetter{RESTOptionsGetter: optsGetter, codec: codec}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: attrs}); err != nil {
		return nil, fmt.Errorf("setting up storage for events: %w", err)
	}
	return store, nil
}

// codecGetter gives the events storage its own codec on the shared datastore.
type codecGetter struct {
	generic.RESTOptionsGetter
	codec runtime.Codec
}

func (g codecGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	cfg := *opts.StorageConfig
	cfg.Codec = g.codec
	opts.StorageConfig = &cfg
	return opts, nil
}

func attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("not an event: %T", obj)
	}
	return labels.Set(e.Labels), Fields(e), nil
}

func matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: attrs}
}

// strategy is an Event's: namespaced, no status, checked for what a
// reader relies on (the object it is about) and bounded in size.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool                                            { return true }
func (strategy) PrepareForCreate(context.Context, runtime.Object)                 {}
func (strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}
func (strategy) Canonicalize(runtime.Object)                                      {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                         { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                    { return true }
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string        { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validate(obj.(*corev1.Event))
}

func (strategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validate(obj.(*corev1.Event))
}

func validate(e *corev1.Event) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&e.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	involved := field.NewPath("involvedObject")
	if e.InvolvedObject.Kind == "" {
		errs = append(errs, field.Required(involved.Child("kind"), "the kind of the object the event is about"))
	}
	if e.InvolvedObject.Name == "" {
		errs = append(errs, field.Required(involved.Child("name"), "the name of the object the event is about"))
	}
	if ns := e.InvolvedObject.Namespace; ns != "" && ns != e.Namespace {
		errs = append(errs, field.Invalid(involved.Child("namespace"), ns, "must be the event's namespace, or empty for a cluster-scoped object"))
	}
	if e.Type != "" && e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	if len(e.Reason) > maxReasonBytes {
		errs = append(errs, field.TooLong(field.NewPath("reason"), "", maxReasonBytes))
	}
	if len(e.Message) > maxMessageBytes {
		errs = append(errs, field.TooLong(field.NewPath("message"), "", maxMessageBytes))
	}
	return errs
}

// table renders `kubectl get events` with kube-apiserver's columns.
type table struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: "Time since the event last occurred."},
	{Name: "Type", Type: "string", Description: "Normal or Warning."},
	{Name: "Reason", Type: "string", Description: "Why the event happened, in CamelCase."},
	{Name: "Object", Type: "string", Description: "The object the event is about."},
	{Name: "Message", Type: "string", Description: "What happened."},
	{Name: "Count", Type: "integer", Priority: 1, Description: "How many times the event occurred."},
	{Name: "First Seen", Type: "string", Priority: 1, Description: "Time since the event first occurred."},
	{Name: "Source", Type: "string", Priority: 1, Description: "The component that recorded the event."},
}

func (table) ConvertToTable(_ context.Context, object runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: columns}
	if lm, err := meta.ListAccessor(object); err == nil {
		t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	}
	add := func(obj runtime.Object) error {
		e, ok := obj.(*corev1.Event)
		if !ok {
			return fmt.Errorf("cannot show %T as an event", obj)
		}
		first, last := e.FirstTimestamp.Time, e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		if first.IsZero() {
			first = last
		}
		object := strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []interface{}{ago(last), e.Type, e.Reason, object, strings.TrimSpace(e.Message), e.Count, ago(first), Fields(e)["source"]},
			Object: runtime.RawExtension{Object: obj},
		})
		return nil
	}
	var err error
	if meta.IsListType(object) {
		err = meta.EachListItem(object, add)
	} else {
		err = add(object)
	}
	return t, err
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t))
}
