package registry

import (
	"context"
	"reflect"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// strategy is the create/update/delete strategy of a kind's main resource:
// clients write spec and metadata; status is kept as stored.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	kind kindInfo
}

// statusStrategy is the update strategy of the status subresource: clients
// write status; spec and metadata are kept as stored.
type statusStrategy struct {
	strategy
}

func (strategy) NamespaceScoped() bool                                     { return false }
func (strategy) AllowCreateOnUpdate(context.Context) bool                  { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool             { return true }
func (strategy) Canonicalize(runtime.Object)                               {}
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// GetResetFields tells server-side apply that status is not the main
// resource's to set, so managed fields stay truthful.
func (s strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (s strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	// Status is the server's: whatever a client sent is dropped, and a kind
	// with a lifecycle starts in its state machine's initial state. Only
	// the server's own in-process creates (Objects) keep the status they
	// carry, which startAt made legal.
	if !isServerWrite(ctx) {
		setField(obj, "Status", reflect.Zero(field_(obj, "Status").Type()))
	}
	if s.kind.lifecycle != nil && phase(obj) == "" {
		setPhase(obj, s.kind.lifecycle.Initial())
	}
	mustAccessor(obj).SetGeneration(1)
	if s.kind.prepare != nil {
		s.kind.prepare(obj, nil)
	}
}

func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	setField(obj, "Status", field_(old, "Status"))
	if !apiequality.Semantic.DeepEqual(field_(obj, "Spec").Interface(), field_(old, "Spec").Interface()) {
		mustAccessor(obj).SetGeneration(mustAccessor(old).GetGeneration() + 1)
	}
	if s.kind.prepare != nil {
		s.kind.prepare(obj, old)
	}
}

func (s strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.validate(obj), s.validateServerAnnotations(ctx, obj, nil)...)
}

func (s strategy) validate(obj runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(mustAccessor(obj), false,
		apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if s.kind.validate != nil {
		errs = append(errs, s.kind.validate(obj)...)
	}
	return errs
}

// validateServerAnnotations refuses a client's write of the kind's
// server-owned annotations; old is nil on create.
func (s strategy) validateServerAnnotations(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if len(s.kind.serverAnnotations) == 0 || isServerWrite(ctx) || isLoopback(ctx) {
		return nil
	}
	var was map[string]string
	if old != nil {
		was = mustAccessor(old).GetAnnotations()
	}
	now := mustAccessor(obj).GetAnnotations()
	var errs field.ErrorList
	for _, k := range s.kind.serverAnnotations {
		v, set := now[k]
		w, had := was[k]
		if set == had && v == w {
			continue
		}
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(k),
			"this annotation is written by the server's machine-pool controller alone (what it records there decides what a driver removes); leave it as it is"))
	}
	return errs
}

// isLoopback reports whether the server's own controllers make the request,
// through the in-process loopback client: a user name no certificate the
// server mints may carry (caller.CheckUser refuses system: names).
func isLoopback(ctx context.Context) bool {
	u, ok := request.UserFrom(ctx)
	return ok && u.GetName() == user.APIServerUser && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(mustAccessor(obj), mustAccessor(old), field.NewPath("metadata"))
	errs = append(errs, s.validate(obj)...)
	errs = append(errs, s.validateServerAnnotations(ctx, obj, old)...)
	if s.kind.validateUpdate != nil {
		errs = append(errs, s.kind.validateUpdate(obj, old)...)
	}
	return errs
}

func (s statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata", "labels"),
			fieldpath.MakePathOrDie("metadata", "annotations")),
	}
}

func (s statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	setField(obj, "Spec", field_(old, "Spec"))
	metav1.ResetObjectMetaForStatus(mustAccessor(obj), mustAccessor(old))
	keepMainManagedFields(mustAccessor(obj), mustAccessor(old))
	if s.kind.prepareStatus != nil {
		s.kind.prepareStatus(obj, old)
	}
	if s.kind.lifecycle == nil {
		return
	}
	if isAgent(ctx) && !apiequality.Semantic.DeepEqual(getTransitions(obj), getTransitions(old)) {
		// Left as sent, so that the agent's write is refused naming the
		// field rather than quietly corrected.
		return
	}
	// The history is the server's to write: keep the stored one and append
	// the record of this change when it is a legal event. An illegal change
	// is left as sent for ValidateUpdate to refuse with the reason.
	transitions := getTransitions(old)
	from, to := phase(old), phase(obj)
	if event, err := s.kind.lifecycle.EventFor(from, to); err == nil && event != "" {
		transitions = appendTransition(transitions, v1alpha1.Transition{
			From: from, To: to, Event: event, Reason: reason(obj), Time: nowFunc(), By: causedBy(ctx),
		})
	}
	setField(obj, "Status.Transitions", reflect.ValueOf(transitions))
}

func (s statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(mustAccessor(obj), mustAccessor(old), field.NewPath("metadata"))
	if errs := s.validateAgent(ctx, obj, old); len(errs) > 0 {
		// Nothing else to say to an agent that wrote what is not its own.
		return errs
	}
	if s.kind.lifecycle != nil {
		if _, err := s.kind.lifecycle.EventFor(phase(old), phase(obj)); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("status", "phase"), phase(obj), err.Error()))
		}
	}
	if s.kind.validateStatus != nil {
		errs = append(errs, s.kind.validateStatus(obj, old)...)
	}
	return errs
}

// validateAgent refuses a machine's agent the status fields the server owns.
func (s statusStrategy) validateAgent(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if !isAgent(ctx) {
		return nil // administrators, controllers, the server's own in-process writes
	}
	if s.kind.agentStatus == nil {
		return field.ErrorList{field.Forbidden(field.NewPath("status"), "a machine's agent may not write the status of "+s.kind.resource)}
	}
	return s.kind.agentStatus(obj, old)
}

// causedBy names the user of the request, for the transition record.
func causedBy(ctx context.Context) string {
	if u, ok := request.UserFrom(ctx); ok {
		return u.GetName()
	}
	return "muster-server"
}

// isAgent reports whether a machine's agent, with its certificate, makes the request.
func isAgent(ctx context.Context) bool {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return false
	}
	_, _, isMachine := caller.Machine(u)
	return isMachine
}

// keepMainManagedFields keeps the server-side-apply records of everything
// but the status subresource as they were: a status write changes status
// only, and may not erase (or forge) who owns the spec and metadata.
func keepMainManagedFields(obj, old metav1.Object) {
	var kept []metav1.ManagedFieldsEntry
	for _, e := range old.GetManagedFields() {
		if e.Subresource != "status" {
			kept = append(kept, e)
		}
	}
	for _, e := range obj.GetManagedFields() {
		if e.Subresource == "status" {
			kept = append(kept, e)
		}
	}
	obj.SetManagedFields(kept)
}

// appendTransition adds rec, numbered after the last record, and drops the
// oldest records past the bound.
func appendTransition(list []v1alpha1.Transition, rec v1alpha1.Transition) []v1alpha1.Transition {
	rec.Seq = int64(len(list)) + 1
	if n := len(list); n > 0 && list[n-1].Seq > 0 {
		rec.Seq = list[n-1].Seq + 1
	}
	list = append(list, rec)
	if over := len(list) - v1alpha1.MaxTransitions; over > 0 {
		list = append([]v1alpha1.Transition(nil), list[over:]...)
	}
	return list
}

func mustAccessor(obj runtime.Object) metav1.Object {
	return obj.(metav1.Object)
}

// The muster.io types share their shape (Spec, Status, and for lifecycle
// kinds Status.Phase/Reason/Transitions) by convention, checked for every
// kind in the tests; reflection lets one strategy serve them all.

func field_(obj runtime.Object, path string) reflect.Value {
	v := reflect.ValueOf(obj).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			panic("registry: " + reflect.TypeOf(obj).String() + " has no field " + path)
		}
	}
	return v
}

func setField(obj runtime.Object, path string, value reflect.Value) {
	f := field_(obj, path)
	f.Set(value.Convert(f.Type()))
}

func phase(obj runtime.Object) string  { return field_(obj, "Status.Phase").String() }
func reason(obj runtime.Object) string { return field_(obj, "Status.Reason").String() }

func setPhase(obj runtime.Object, p string) { setField(obj, "Status.Phase", reflect.ValueOf(p)) }

func getTransitions(obj runtime.Object) []v1alpha1.Transition {
	return field_(obj, "Status.Transitions").Interface().([]v1alpha1.Transition)
}
