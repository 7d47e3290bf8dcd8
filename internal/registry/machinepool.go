package registry

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Bounds of a pool: its replicas are processes or hosts the server creates,
// and its driver config is handed to a driver on every call.
const (
	maxPoolReplicas      = 1000
	maxDriverConfigKeys  = 64
	maxDriverConfigValue = 4096
)

// MachinePool is the storage description of machine pools.
var MachinePool = Kind[*api.MachinePool]{
	Resource:   "machinepools",
	Singular:   "machinepool",
	ShortNames: []string{"mpool"},
	New:        func() *api.MachinePool { return &api.MachinePool{} },
	NewList:    func() runtime.Object { return &api.MachinePoolList{} },
	Fields:     api.MachinePoolFields,
	Validate: func(p *api.MachinePool) field.ErrorList {
		spec := field.NewPath("spec")
		errs := validateDNSSubdomain(p.Spec.Cluster, spec.Child("cluster"), true)
		if p.Spec.Replicas < 0 || p.Spec.Replicas > maxPoolReplicas {
			errs = append(errs, field.Invalid(spec.Child("replicas"), p.Spec.Replicas, fmt.Sprintf("must be 0 to %d", maxPoolReplicas)))
		}
		tmpl := spec.Child("template")
		if msgs := validation.IsDNS1123Label(p.Spec.Template.Driver); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tmpl.Child("driver"), p.Spec.Template.Driver, "a driver name such as \"process\": "+msgs[0]))
		}
		if len(p.Spec.Template.DriverConfig) > maxDriverConfigKeys {
			errs = append(errs, field.TooMany(tmpl.Child("driverConfig"), len(p.Spec.Template.DriverConfig), maxDriverConfigKeys))
		}
		for k, v := range p.Spec.Template.DriverConfig {
			if msgs := validation.IsConfigMapKey(k); len(msgs) > 0 {
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
	},
	ValidateUpdate: func(p, old *api.MachinePool) field.ErrorList {
		return validateImmutable(p.Spec.Cluster, old.Spec.Cluster, field.NewPath("spec", "cluster"))
	},
	ValidateStatus: func(p, old *api.MachinePool) field.ErrorList {
		return validateMaxLen(p.Status.Message, maxMessageBytes, field.NewPath("status", "message"))
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "Cluster the pool's machines join."},
		{Name: "Desired", Type: "integer", Description: "Machines the pool keeps (spec.replicas)."},
		{Name: "Current", Type: "integer", Description: "Machines the pool has."},
		{Name: "Ready", Type: "integer", Description: "Machines that are Running."},
		{Name: "Up-to-date", Type: "integer", Description: "Machines made from the current template."},
		{Name: "Driver", Type: "string", Description: "Driver that creates the hosts."},
		{Name: "Revision", Type: "string", Description: "Hash of the current template."},
	},
	Cells: func(p *api.MachinePool) []interface{} {
		return []interface{}{p.Spec.Cluster, p.Spec.Replicas, p.Status.Replicas, p.Status.ReadyReplicas, p.Status.UpdatedReplicas, p.Spec.Template.Driver, p.Status.Revision}
	},
}
