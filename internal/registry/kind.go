package registry

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
)

// Object is what every muster.io kind is: a runtime.Object with ObjectMeta.
type Object interface {
	runtime.Object
	metav1.Object
}

// Kind says what is particular to one resource. Everything else (the
// spec/status split, generation, the lifecycle check, tables, selectors) is
// the generic strategy's. Every muster.io type has a Spec and a Status field;
// kinds with a Lifecycle also have Status.Phase, Status.Reason and
// Status.Transitions.
type Kind[T Object] struct {
	// Resource is the plural resource name, e.g. "machines".
	Resource string
	// Singular is the singular resource name, e.g. "machine".
	Singular string
	// ShortNames are kubectl's abbreviations, e.g. "ma".
	ShortNames []string
	// New and NewList allocate empty objects.
	New     func() T
	NewList func() runtime.Object
	// Fields returns the field-selector fields (from the API package, the one list of them).
	Fields func(T) fields.Set
	// Lifecycle is the kind's state machine; nil for kinds without phases.
	Lifecycle *fsm.Definition
	// Prepare fills server-owned fields after the generic preparation; old is
	// nil on create. Optional.
	Prepare func(obj, old T)
	// Validate checks a new object's spec. Optional.
	Validate func(obj T) field.ErrorList
	// ValidateUpdate checks a spec change, e.g. immutable fields. Optional.
	ValidateUpdate func(obj, old T) field.ErrorList
	// ValidateStatus checks a status update beyond the phase check. Optional.
	ValidateStatus func(obj, old T) field.ErrorList
	// PrepareStatus fills server-owned status fields (timestamps) on every
	// status update, whoever writes it. Optional.
	PrepareStatus func(obj, old T)
	// AgentStatus refuses the status changes a machine's agent may not
	// make to its own object: it reports what it observes, the server owns
	// the rest (SPEC §8). Nil: agents may not write the kind's status.
	AgentStatus func(obj, old T) field.ErrorList
	// ServerAnnotations are annotations only the server's own controllers
	// write (through the in-process loopback client): a create or update
	// from any API client, an admin's included, that sets, changes or
	// removes one is refused with 422. For what the server trusts later,
	// such as the driver state a host's removal acts on.
	ServerAnnotations []string
	// Columns and Cells are the extra `kubectl get` columns between NAME and AGE.
	Columns []metav1.TableColumnDefinition
	Cells   func(T) []interface{}
	// HeardCells, if set, replaces Cells for kinds whose object stands for
	// an agent: heard is when the server last heard it (in memory, from any
	// server), zero if it does not know.
	HeardCells func(obj T, heard time.Time) []interface{}
	// WideColumns and WideCells come after AGE, shown by `kubectl get -o
	// wide` only (their columns have priority 1).
	WideColumns []metav1.TableColumnDefinition
	WideCells   func(T) []interface{}
}

// erase turns the typed hooks into hooks on runtime.Object, so that the
// strategy, table convertor and selector code exist once for all kinds.
func (k Kind[T]) erase() kindInfo {
	cast := func(o runtime.Object) T { return o.(T) }
	info := kindInfo{
		resource:    k.Resource,
		singular:    k.Singular,
		shortNames:  k.ShortNames,
		newFunc:     func() runtime.Object { return k.New() },
		newList:     k.NewList,
		fields:      func(o runtime.Object) fields.Set { return k.Fields(cast(o)) },
		lifecycle:   k.Lifecycle,
		columns:     k.Columns,
		wideColumns: k.WideColumns,

		serverAnnotations: k.ServerAnnotations,
	}
	if k.Prepare != nil {
		info.prepare = func(obj, old runtime.Object) {
			var o T
			if old != nil {
				o = cast(old)
			}
			k.Prepare(cast(obj), o)
		}
	}
	if k.Validate != nil {
		info.validate = func(obj runtime.Object) field.ErrorList { return k.Validate(cast(obj)) }
	}
	if k.ValidateUpdate != nil {
		info.validateUpdate = func(obj, old runtime.Object) field.ErrorList { return k.ValidateUpdate(cast(obj), cast(old)) }
	}
	if k.ValidateStatus != nil {
		info.validateStatus = func(obj, old runtime.Object) field.ErrorList { return k.ValidateStatus(cast(obj), cast(old)) }
	}
	if k.PrepareStatus != nil {
		info.prepareStatus = func(obj, old runtime.Object) { k.PrepareStatus(cast(obj), cast(old)) }
	}
	if k.AgentStatus != nil {
		info.agentStatus = func(obj, old runtime.Object) field.ErrorList { return k.AgentStatus(cast(obj), cast(old)) }
	}
	if k.Cells != nil {
		info.cells = func(o runtime.Object) []interface{} { return k.Cells(cast(o)) }
	}
	if k.HeardCells != nil {
		info.heardCells = func(o runtime.Object, heard time.Time) []interface{} { return k.HeardCells(cast(o), heard) }
	}
	if k.WideCells != nil {
		info.wideCells = func(o runtime.Object) []interface{} { return k.WideCells(cast(o)) }
	}
	return info
}

// kindInfo is Kind with its type erased.
type kindInfo struct {
	resource, singular string
	shortNames         []string
	newFunc            func() runtime.Object
	newList            func() runtime.Object
	fields             func(runtime.Object) fields.Set
	lifecycle          *fsm.Definition
	prepare            func(obj, old runtime.Object)
	validate           func(runtime.Object) field.ErrorList
	validateUpdate     func(obj, old runtime.Object) field.ErrorList
	validateStatus     func(obj, old runtime.Object) field.ErrorList
	prepareStatus      func(obj, old runtime.Object)
	agentStatus        func(obj, old runtime.Object) field.ErrorList
	columns            []metav1.TableColumnDefinition
	cells              func(runtime.Object) []interface{}
	heardCells         func(runtime.Object, time.Time) []interface{}
	wideColumns        []metav1.TableColumnDefinition
	wideCells          func(runtime.Object) []interface{}
	serverAnnotations  []string
}

// nowFunc is the clock of transition records; a variable so tests can pin it.
var nowFunc = metav1.Now
