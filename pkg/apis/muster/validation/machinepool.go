package validation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/driver"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Bounds of a pool: its replicas are processes or hosts the server creates,
// and its driver config is handed to a driver on every call.
const (
	maxPoolReplicas      = 1000
	maxDriverConfigKeys  = 64
	maxDriverConfigValue = 4096
)

// ValidateMachinePool checks a MachinePool's spec on its own; what its
// driver accepts is ValidateMachinePoolDriverConfig's.
func ValidateMachinePool(p *api.MachinePool) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateDNSSubdomain(p.Spec.Cluster, spec.Child("cluster"), true)
	if p.Spec.Replicas < 0 || p.Spec.Replicas > maxPoolReplicas {
		errs = append(errs, field.Invalid(spec.Child("replicas"), p.Spec.Replicas, fmt.Sprintf("must be 0 to %d", maxPoolReplicas)))
	}
	tmpl := spec.Child("template")
	if msgs := utilvalidation.IsDNS1123Label(p.Spec.Template.Driver); len(msgs) > 0 {
		errs = append(errs, field.Invalid(tmpl.Child("driver"), p.Spec.Template.Driver, "a driver name such as \"process\": "+msgs[0]))
	}
	if len(p.Spec.Template.DriverConfig) > maxDriverConfigKeys {
		errs = append(errs, field.TooMany(tmpl.Child("driverConfig"), len(p.Spec.Template.DriverConfig), maxDriverConfigKeys))
	}
	for k, v := range p.Spec.Template.DriverConfig {
		if msgs := utilvalidation.IsConfigMapKey(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tmpl.Child("driverConfig").Key(k), k, msgs[0]))
		}
		errs = append(errs, validateMaxLen(v, maxDriverConfigValue, tmpl.Child("driverConfig").Key(k))...)
	}
	st := spec.Child("strategy")
	surge, unavail := int32(1), int32(0)
	if p.Spec.Strategy.MaxSurge != nil {
		surge = *p.Spec.Strategy.MaxSurge
		errs = append(errs, validateNonNegative(surge, st.Child("maxSurge"))...)
	}
	if p.Spec.Strategy.MaxUnavailable != nil {
		unavail = *p.Spec.Strategy.MaxUnavailable
		errs = append(errs, validateNonNegative(unavail, st.Child("maxUnavailable"))...)
	}
	if surge+unavail < 1 {
		errs = append(errs, field.Invalid(st, fmt.Sprintf("maxSurge %d, maxUnavailable %d", surge, unavail), "maxSurge + maxUnavailable must be at least 1, or a template change could never roll"))
	}
	switch p.Spec.DeletePolicy {
	case "", "Newest", "Oldest", "Random":
	default:
		errs = append(errs, field.NotSupported(spec.Child("deletePolicy"), p.Spec.DeletePolicy, []string{"Newest", "Oldest", "Random"}))
	}
	if h := p.Spec.Health.StartupTimeout; h != nil && h.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("health", "startupTimeout"), h.Duration.String(), "must not be negative"))
	}
	if h := p.Spec.Health.UnhealthyTimeout; h != nil && h.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("health", "unhealthyTimeout"), h.Duration.String(), "must not be negative"))
	}
	if m := p.Spec.Health.MaxUnhealthy; m != nil {
		errs = append(errs, validateNonNegative(*m, spec.Child("health", "maxUnhealthy"))...)
	}
	errs = append(errs, validateLabels(p.Spec.Template.Labels, tmpl.Child("labels"))...)
	errs = append(errs, validateRoles(p.Spec.Template.Roles, tmpl.Child("roles"))...)
	for _, reserved := range []string{api.PoolLabel, api.PoolRevisionLabel} {
		if _, ok := p.Spec.Template.Labels[reserved]; ok {
			errs = append(errs, field.Forbidden(tmpl.Child("labels").Key(reserved), "the server sets this label"))
		}
	}
	return errs
}

// ValidateMachinePoolUpdate refuses moving a pool to another cluster.
func ValidateMachinePoolUpdate(p, old *api.MachinePool) field.ErrorList {
	return validateImmutable(p.Spec.Cluster, old.Spec.Cluster, field.NewPath("spec", "cluster"))
}

// ValidateMachinePoolStatusUpdate bounds the pool controller's message.
func ValidateMachinePoolStatusUpdate(p, _ *api.MachinePool) field.ErrorList {
	return validateMaxLen(p.Status.Message, maxMessageBytes, field.NewPath("status", "message"))
}

// DriverSchemas is where ValidateMachinePoolDriverConfig finds the config a
// pool's driver accepts: the server passes its driver.Registry, the same
// one the pool controller creates hosts with, so that a pool is checked
// against the driver that will run it.
type DriverSchemas interface {
	Schema(ctx context.Context, name string) (driver.Schema, error)
	// Validate is the driver's own check of a config, the one its create
	// makes: a *driver.ConfigError when it refuses it.
	Validate(ctx context.Context, name string, config map[string]string) error
}

// ValidateMachinePoolDriverConfig checks a pool's driverConfig against its
// driver's schema, then asks the driver itself: a typo in a key or a bad
// integer is refused naming the field, instead of surfacing minutes later
// as a Failed Machine. The field errors are a config the driver refuses or
// a driver that does not exist; the error is a driver that exists but could
// not say what it accepts (its schema call failed or timed out), which the
// pool cannot fix.
func ValidateMachinePoolDriverConfig(ctx context.Context, drivers DriverSchemas, p *api.MachinePool) (field.ErrorList, error) {
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
