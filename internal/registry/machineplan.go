package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// defaultMaxFailures is a plan's spec.maxFailures when it gives none.
const defaultMaxFailures = 3

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
	Validate:       validation.ValidateMachinePlan,
	ValidateStatus: validation.ValidateMachinePlanStatusUpdate,
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
		applied := p.Applied()
		return []interface{}{string(p.Status.State), sum, applied, p.Status.FailureCount}
	},
}
