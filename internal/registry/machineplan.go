package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Plan limits. A plan travels in one datastore row and to every watcher, so
// it stays small; large payloads belong on a file server the plan points at.
const (
	maxPlanFileBytes   = 64 << 10
	maxPlanTotalBytes  = 512 << 10
	maxPlanEntries     = 64
	maxTimeoutSeconds  = 24 * 60 * 60
	defaultMaxFailures = 3
)

// PlanChecksum is a plan's identity: the SHA-256 of its spec's JSON. The
// server computes it; agents compare checksums, never resourceVersions.
func PlanChecksum(spec *api.MachinePlanSpec) string {
	b, err := json.Marshal(spec)
	if err != nil {
		// A spec made of strings, ints and bools always marshals.
		panic(fmt.Sprintf("marshal plan spec: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// MachinePlan is the storage description of machine plans.
var MachinePlan = Kind[*api.MachinePlan]{
	Resource:   "machineplans",
	Singular:   "machineplan",
	ShortNames: []string{"mp", "plan"},
	New:        func() *api.MachinePlan { return &api.MachinePlan{} },
	NewList:    func() runtime.Object { return &api.MachinePlanList{} },
	Fields:     api.MachinePlanFields,
	Prepare: func(p, old *api.MachinePlan) {
		if p.Spec.MaxFailures == 0 {
			p.Spec.MaxFailures = defaultMaxFailures
		}
		// A changed spec is a new plan: the agent must run it from the start.
		sum := PlanChecksum(&p.Spec)
		if old == nil || sum != p.Status.Checksum {
			p.Status.Checksum = sum
			p.Status.State = api.PlanStatePending
			p.Status.FailureCount = 0
		}
	},
	Validate:       validatePlanSpec,
	ValidateStatus: validatePlanStatus,
	PrepareStatus:  preparePlanStatus,
	AgentStatus:    planAgentStatus,
	Columns: []metav1.TableColumnDefinition{
		{Name: "State", Type: "string", Description: "pending, in-progress, succeeded or failed."},
		{Name: "Checksum", Type: "string", Description: "Identity of the current plan (first 12 hex digits)."},
		{Name: "Applied", Type: "boolean", Description: "Whether the agent applied the current plan."},
		{Name: "Failures", Type: "integer", Description: "Failed attempts of the current plan."},
	},
	Cells: func(p *api.MachinePlan) []interface{} {
		sum := p.Status.Checksum
		if len(sum) > 12 {
			sum = sum[:12]
		}
		applied := p.Status.Checksum != "" && p.Status.AppliedChecksum == p.Status.Checksum
		return []interface{}{string(p.Status.State), sum, applied, p.Status.FailureCount}
	},
}

func validatePlanSpec(p *api.MachinePlan) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	total := 0
	if len(p.Spec.Files) > maxPlanEntries {
		errs = append(errs, field.TooMany(spec.Child("files"), len(p.Spec.Files), maxPlanEntries))
	}
	seen := map[string]bool{}
	for i, f := range p.Spec.Files {
		fp := spec.Child("files").Index(i)
		switch {
		case f.Path == "":
			errs = append(errs, field.Required(fp.Child("path"), "an absolute path such as /etc/muster/config.yaml"))
		case !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.Contains(f.Path, "/../"):
			errs = append(errs, field.Invalid(fp.Child("path"), f.Path,
				"must be an absolute, clean path (no relative parts, no '..', no trailing '/')"))
		case seen[f.Path]:
			errs = append(errs, field.Duplicate(fp.Child("path"), f.Path))
		}
		seen[f.Path] = true
		if len(f.Content) > maxPlanFileBytes {
			errs = append(errs, field.TooLong(fp.Child("content"), "", maxPlanFileBytes))
		}
		total += len(f.Content)
		if f.Mode < 0 || f.Mode > 0o7777 {
			errs = append(errs, field.Invalid(fp.Child("mode"), f.Mode, "must be permission bits between 0 and 07777 (4095)"))
		}
		if f.Delete && f.Content != "" {
			errs = append(errs, field.Invalid(fp.Child("content"), "<content>", "must be empty when delete is true"))
		}
	}
	if total > maxPlanTotalBytes {
		errs = append(errs, field.TooLong(spec.Child("files"), "", maxPlanTotalBytes))
	}
	if len(p.Spec.Instructions) > maxPlanEntries {
		errs = append(errs, field.TooMany(spec.Child("instructions"), len(p.Spec.Instructions), maxPlanEntries))
	}
	names := map[string]bool{}
	for i, in := range p.Spec.Instructions {
		ip := spec.Child("instructions").Index(i)
		errs = append(errs, validateEntryName(in.Name, names, ip.Child("name"))...)
		if in.Command == "" {
			errs = append(errs, field.Required(ip.Child("command"), "the program to run"))
		}
		errs = append(errs, validateTimeout(in.TimeoutSeconds, ip.Child("timeoutSeconds"))...)
		for j, e := range in.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				errs = append(errs, field.Invalid(ip.Child("env").Index(j), e, `must be "NAME=value"`))
			}
		}
	}
	probeNames := map[string]bool{}
	for i, pr := range p.Spec.Probes {
		pp := spec.Child("probes").Index(i)
		errs = append(errs, validateEntryName(pr.Name, probeNames, pp.Child("name"))...)
		switch {
		case pr.HTTPGet == nil && pr.Exec == nil:
			errs = append(errs, field.Required(pp, "exactly one probe type: httpGet or exec"))
		case pr.HTTPGet != nil && pr.Exec != nil:
			errs = append(errs, field.Forbidden(pp, "exactly one probe type may be set: httpGet or exec, not both"))
		case pr.HTTPGet != nil:
			if u, err := url.Parse(pr.HTTPGet.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, field.Invalid(pp.Child("httpGet", "url"), pr.HTTPGet.URL, "must be an http:// or https:// URL"))
			}
		case pr.Exec != nil && pr.Exec.Command == "":
			errs = append(errs, field.Required(pp.Child("exec", "command"), "the program to run"))
		}
		errs = append(errs, validateTimeout(pr.TimeoutSeconds, pp.Child("timeoutSeconds"))...)
		errs = append(errs, validateNonNegative(pr.PeriodSeconds, pp.Child("periodSeconds"))...)
		errs = append(errs, validateNonNegative(pr.SuccessThreshold, pp.Child("successThreshold"))...)
		errs = append(errs, validateNonNegative(pr.FailureThreshold, pp.Child("failureThreshold"))...)
	}
	return append(errs, validateNonNegative(p.Spec.MaxFailures, spec.Child("maxFailures"))...)
}

func validateEntryName(name string, seen map[string]bool, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "names the entry in reported status")}
	}
	if seen[name] {
		return field.ErrorList{field.Duplicate(path, name)}
	}
	seen[name] = true
	return validateMaxLen(name, 63, path)
}

func validateTimeout(seconds int32, path *field.Path) field.ErrorList {
	if seconds < 0 || seconds > maxTimeoutSeconds {
		return field.ErrorList{field.Invalid(path, seconds, fmt.Sprintf("must be between 0 (default) and %d", maxTimeoutSeconds))}
	}
	return nil
}

func validatePlanStatus(p, _ *api.MachinePlan) field.ErrorList {
	status := field.NewPath("status")
	var errs field.ErrorList
	if !planStates[p.Status.State] {
		errs = append(errs, field.NotSupported(status.Child("state"), p.Status.State,
			[]string{"pending", "in-progress", "succeeded", "failed"}))
	}
	errs = append(errs, validateNonNegative(p.Status.FailureCount, status.Child("failureCount"))...)
	for i, o := range p.Status.Output {
		errs = append(errs, validateMaxLen(o.Output, 4096, status.Child("output").Index(i).Child("output"))...)
	}
	return errs
}
