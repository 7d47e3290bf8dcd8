package registry

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// poolREST checks a MachinePool's driverConfig against its driver's
// schema (validation.ValidateMachinePoolDriverConfig) when the pool is
// created or its template changes: a typo in a key or a bad integer is
// refused with 422 naming the field, instead of surfacing minutes later as
// a Failed Machine. It runs as the store's validation, after the
// strategy's static checks and before anything is written, so a dry run
// is refused the same way and writes nothing.
// Updates that leave the template alone (scaling, finalizers, labels) are
// not checked, so a pool whose driver is gone can still be scaled down
// and deleted.
type poolREST struct {
	*REST
	drivers validation.DriverSchemas
}

// Create implements rest.Creater.
func (r *poolREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	return r.REST.Create(ctx, obj, r.onCreate(createValidation), options)
}

// Update implements rest.Updater; patches and server-side apply reach it
// too. A server-side apply of a pool that does not exist yet creates it
// through here, with createValidation, so that is checked as a create.
func (r *poolREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	check := func(ctx context.Context, obj, old runtime.Object) error {
		if updateValidation != nil {
			if err := updateValidation(ctx, obj, old); err != nil {
				return err
			}
		}
		p, was := obj.(*api.MachinePool), old.(*api.MachinePool)
		if apiequality.Semantic.DeepEqual(p.Spec.Template, was.Spec.Template) {
			return nil
		}
		return r.checkDriver(ctx, p)
	}
	return r.REST.Update(ctx, name, objInfo, r.onCreate(createValidation), check, forceAllowCreate, options)
}

// onCreate adds the driver check to a create's validation.
func (r *poolREST) onCreate(createValidation rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if createValidation != nil {
			if err := createValidation(ctx, obj); err != nil {
				return err
			}
		}
		return r.checkDriver(ctx, obj.(*api.MachinePool))
	}
}

// checkDriver returns 422 for a config the driver refuses or a driver
// that does not exist, and 503 when the driver cannot say what it accepts
// (its schema call failed or timed out): the pool may well be right, and
// the fix is the driver's, not the pool's.
func (r *poolREST) checkDriver(ctx context.Context, p *api.MachinePool) error {
	errs, err := validation.ValidateMachinePoolDriverConfig(ctx, r.drivers, p)
	if err != nil {
		return apierrors.NewServiceUnavailable(err.Error())
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: api.GroupName, Kind: "MachinePool"}, p.Name, errs)
	}
	return nil
}
