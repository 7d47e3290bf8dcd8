package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/driver"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// DriverSchemas is where admission finds the config a pool's driver
// accepts: driver.Registry, the same one the pool controller creates
// hosts with, so a pool is checked against the driver that will run it.
type DriverSchemas interface {
	Schema(ctx context.Context, name string) (driver.Schema, error)
	// Validate is the driver's own check of a config, the one its create
	// makes: a *driver.ConfigError when it refuses it.
	Validate(ctx context.Context, name string, config map[string]string) error
}

// poolREST checks a MachinePool's driverConfig against its driver's
// schema when the pool is created or its template changes: a typo in a
// key or a bad integer is refused with 422 naming the field, instead of
// surfacing minutes later as a Failed Machine. It runs as the store's
// validation, after the strategy's static checks and before anything is
// written, so a dry run is refused the same way and writes nothing.
// Updates that leave the template alone (scaling, finalizers, labels) are
// not checked, so a pool whose driver is gone can still be scaled down
// and deleted.
type poolREST struct {
	*REST
	drivers DriverSchemas
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
	errs, err := checkDriverConfig(ctx, r.drivers, p)
	if err != nil {
		return apierrors.NewServiceUnavailable(err.Error())
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: api.GroupName, Kind: "MachinePool"}, p.Name, errs)
	}
	return nil
}

// checkDriverConfig is the check itself, apart from the REST plumbing so
// tests can run it on a real driver registry. The error is a driver that
// exists but could not give its schema.
func checkDriverConfig(ctx context.Context, drivers DriverSchemas, p *api.MachinePool) (field.ErrorList, error) {
	tmpl := field.NewPath("spec", "template")
	s, err := drivers.Schema(ctx, p.Spec.Template.Driver)
	var unknown *driver.UnknownError
	switch {
	case errors.As(err, &unknown):
		return field.ErrorList{field.Invalid(tmpl.Child("driver"), p.Spec.Template.Driver, unknown.Error())}, nil
	case err != nil:
		return nil, fmt.Errorf("pool %s was not saved: driver %q cannot say what driverConfig it accepts, so the pool cannot be checked: %w", p.Name, p.Spec.Template.Driver, err)
	}
	problems := s.Check(p.Spec.Template.DriverConfig)
	if len(problems) == 0 {
		// The types are right: ask the driver itself, which knows more
		// (a path it would put in a command line, a host key that does
		// not parse) and would refuse the config at create.
		err := drivers.Validate(ctx, p.Spec.Template.Driver, p.Spec.Template.DriverConfig)
		var refused *driver.ConfigError
		switch {
		case errors.As(err, &refused):
			path := tmpl.Child("driverConfig")
			value := any(p.Spec.Template.DriverConfig)
			if refused.Key != "" {
				path, value = path.Key(refused.Key), refused.Value
			}
			return field.ErrorList{field.Invalid(path, value, fmt.Sprintf("driver %q refuses it: %s", p.Spec.Template.Driver, refused.Reason))}, nil
		case err != nil:
			return nil, fmt.Errorf("pool %s was not saved: driver %q could not check its driverConfig: %w", p.Name, p.Spec.Template.Driver, err)
		}
	}
	keys := make([]string, 0, len(problems))
	for k := range problems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs field.ErrorList
	for _, k := range keys {
		path := tmpl.Child("driverConfig").Key(k)
		value, set := p.Spec.Template.DriverConfig[k]
		msg := fmt.Sprintf("%s; driver %q accepts %s", problems[k], p.Spec.Template.Driver, describeFields(s))
		if !set {
			errs = append(errs, field.Required(path, msg))
		} else {
			errs = append(errs, field.Invalid(path, value, msg))
		}
	}
	return errs, nil
}

// describeFields is a schema in one line: "size (integer, required),
// zone (string, default east-1)", or "no config" for a driver that takes none.
func describeFields(s driver.Schema) string {
	if len(s.Fields) == 0 {
		return "no driverConfig"
	}
	var parts []string
	for _, f := range s.Fields {
		var attrs []string
		attrs = append(attrs, f.Type)
		if f.Required {
			attrs = append(attrs, "required")
		}
		if f.Default != "" {
			attrs = append(attrs, "default "+f.Default)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", f.Name, strings.Join(attrs, ", ")))
	}
	return strings.Join(parts, ", ")
}
