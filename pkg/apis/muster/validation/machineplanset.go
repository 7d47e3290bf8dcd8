package validation

import (
	"fmt"
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ValidateMachinePlanSet checks a plan set's spec; its templates are held
// to a MachinePlan's own rules, since each becomes one.
func ValidateMachinePlanSet(s *api.MachinePlanSet) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateDNSSubdomain(s.Spec.Cluster, spec.Child("cluster"), false)
	sel := spec.Child("selector")
	errs = append(errs, metav1validation.ValidateLabelSelector(&s.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, sel)...)
	empty := len(s.Spec.Selector.MatchLabels) == 0 && len(s.Spec.Selector.MatchExpressions) == 0
	switch {
	case empty && !s.Spec.MatchAll:
		errs = append(errs, field.Required(sel, "an empty selector selects every machine: give matchLabels or matchExpressions (for example matchLabels: {role: worker}), or set spec.matchAll: true to mean the whole fleet"))
	case !empty && s.Spec.MatchAll:
		errs = append(errs, field.Invalid(spec.Child("matchAll"), true, "matchAll selects every machine and cannot be combined with a selector: drop one of them"))
	}
	if mu := s.Spec.Strategy.MaxUnavailable; mu != nil {
		errs = append(errs, validateMaxUnavailable(*mu, spec.Child("strategy", "maxUnavailable"))...)
	}
	errs = append(errs, validatePartitions(s.Spec.Strategy.Partitions, spec.Child("strategy", "partitions"))...)
	if d := s.Spec.Strategy.ProgressDeadline; d != nil && (d.Duration < minProgressDeadline || d.Duration > maxProgressDeadline) {
		errs = append(errs, field.Invalid(spec.Child("strategy", "progressDeadline"), d.Duration.String(),
			fmt.Sprintf("must be %s to %s: long enough for a plan to run and its probes to settle (default %s)", minProgressDeadline, maxProgressDeadline, api.DefaultPlanSetProgressDeadline)))
	}
	// The template is a MachinePlan's spec: the plan's own validation,
	// with its paths moved under spec.template.
	errs = append(errs, ValidateMachinePlanSpec(&s.Spec.Template, spec.Child("template"))...)
	if d := s.Spec.Drain; d != nil {
		errs = append(errs, ValidateMachinePlanSpec(&d.Template, spec.Child("drain", "template"))...)
		if d.Timeout != nil {
			errs = append(errs, validateDrainTimeout(d.Timeout.Duration, spec.Child("drain", "timeout"))...)
		}
	}
	switch s.Spec.OnUnmatch {
	case "", api.OnUnmatchKeep, api.OnUnmatchRemoveFiles:
	default:
		errs = append(errs, field.NotSupported(spec.Child("onUnmatch"), s.Spec.OnUnmatch,
			[]string{string(api.OnUnmatchKeep), string(api.OnUnmatchRemoveFiles)}))
	}
	return errs
}

// validateDrainTimeout bounds how long a deleted machine may wait for its
// drain plan: long enough to run one, short enough that a machine whose
// agent is gone is still deleted the same day.
func validateDrainTimeout(d time.Duration, fld *field.Path) field.ErrorList {
	if d < time.Second || d > api.MaxDrainTimeout {
		return field.ErrorList{field.Invalid(fld, d.String(), fmt.Sprintf("must be 1s to %s (for example 5m); leave it out for the default %s", api.MaxDrainTimeout, api.DefaultDrainTimeout))}
	}
	return nil
}

func validateMaxUnavailable(v intstr.IntOrString, fld *field.Path) field.ErrorList {
	if v.Type == intstr.Int {
		if v.IntVal < 1 {
			return field.ErrorList{field.Invalid(fld, v.IntVal, "must be at least 1, or a template change could never roll out: to hold a rollout set spec.strategy.paused: true")}
		}
		return nil
	}
	var pct int
	if _, err := fmt.Sscanf(v.StrVal, "%d%%", &pct); err != nil || fmt.Sprintf("%d%%", pct) != v.StrVal {
		return field.ErrorList{field.Invalid(fld, v.StrVal, "must be a count such as 2 or a percent such as \"25%\"")}
	}
	if pct < 1 || pct > 100 {
		return field.ErrorList{field.Invalid(fld, v.StrVal, "a percent must be 1% to 100%")}
	}
	return nil
}

// progressDeadline bounds: under 10s a slow agent's first heartbeat would
// fail a good revision; over a day a bad one would go unnoticed.
const (
	minProgressDeadline = 10 * time.Second
	maxProgressDeadline = 24 * time.Hour
)

func validatePartitions(parts []api.PlanSetPartition, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(parts) > api.MaxPlanSetPartitions {
		errs = append(errs, field.TooMany(fld, len(parts), api.MaxPlanSetPartitions))
	}
	seen := map[string]bool{}
	for i, p := range parts {
		f := fld.Index(i)
		for _, msg := range utilvalidation.IsDNS1123Label(p.Name) {
			errs = append(errs, field.Invalid(f.Child("name"), p.Name, msg+" (for example control-plane)"))
		}
		if seen[p.Name] {
			errs = append(errs, field.Duplicate(f.Child("name"), p.Name))
		}
		seen[p.Name] = true
		errs = append(errs, metav1validation.ValidateLabelSelector(&p.Selector, metav1validation.LabelSelectorValidationOptions{}, f.Child("selector"))...)
		if len(p.Selector.MatchLabels) == 0 && len(p.Selector.MatchExpressions) == 0 {
			errs = append(errs, field.Required(f.Child("selector"), "an empty selector puts every machine in this partition and leaves the later ones empty: give matchLabels or matchExpressions (for example matchLabels: {role: control-plane})"))
		}
	}
	return errs
}

// ValidateMachinePlanSetStatusUpdate bounds the plan-set controller's
// status: its messages, its revision history and the template it keeps.
func ValidateMachinePlanSetStatusUpdate(s, old *api.MachinePlanSet) field.ErrorList {
	var errs field.ErrorList
	for i, c := range s.Status.Conditions {
		errs = append(errs, validateMaxLen(c.Message, maxMessageBytes, field.NewPath("status", "conditions").Index(i).Child("message"))...)
	}
	if len(s.Status.Revisions) > api.MaxPlanSetRevisions {
		errs = append(errs, field.TooMany(field.NewPath("status", "revisions"), len(s.Status.Revisions), api.MaxPlanSetRevisions))
	}
	// The kept template is bounded as spec.template is, so the status
	// is never more than twice a valid spec.
	if t := s.Status.LastCompleteTemplate; t != nil {
		errs = append(errs, ValidateMachinePlanSpec(t, field.NewPath("status", "lastCompleteTemplate"))...)
	}
	for _, f := range []struct {
		v    string
		name string
	}{{s.Status.FailedRevision, "failedRevision"}, {s.Status.LastCompleteRevision, "lastCompleteRevision"}, {s.Status.CurrentPartition, "currentPartition"}} {
		errs = append(errs, validateMaxLen(f.v, 253, field.NewPath("status", f.name))...)
	}
	return errs
}
