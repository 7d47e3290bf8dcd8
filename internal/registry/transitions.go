package registry

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/metrics"
)

// Transitions are counted here, where they are written: every phase change
// of every kind, by an API client or by the server's own code, goes
// through a status store's update (or, for an object the server creates
// with a status, its create). A compare-and-swap retries its update
// against the fresh object, so what counts is the attempt that was
// stored, and only once the datastore accepted it.

// phaseWatch is a status update's objInfo that remembers the phases of its
// last attempt.
type phaseWatch struct {
	rest.UpdatedObjectInfo
	from, to string
}

func (w *phaseWatch) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	obj, err := w.UpdatedObjectInfo.UpdatedObject(ctx, old)
	w.from, w.to = "", ""
	if err == nil && obj != nil {
		w.from, w.to = phase(old), phase(obj)
	}
	return obj, err
}

// updateCounted is store.Update on a status store of def's kind, counting
// the transition it stored.
func updateCounted(ctx context.Context, store *genericregistry.Store, def *fsm.Definition, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if def == nil {
		return store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
	}
	w := &phaseWatch{UpdatedObjectInfo: objInfo}
	out, created, err := store.Update(ctx, name, w, createValidation, updateValidation, false, options)
	if err == nil && w.from != w.to && !slices.Contains(options.DryRun, metav1.DryRunAll) {
		metrics.Transition(def, w.from, w.to)
	}
	return out, created, err
}

// countCreated counts the transitions recorded on an object the server
// created with a status (a Machine that starts Registering, a registration
// granted in its request); an API client's create carries none.
func countCreated(def *fsm.Definition) genericregistry.AfterCreateFunc {
	return func(obj runtime.Object, options *metav1.CreateOptions) {
		if slices.Contains(options.DryRun, metav1.DryRunAll) {
			return
		}
		for _, t := range getTransitions(obj) {
			metrics.Transition(def, t.From, t.To)
		}
	}
}
