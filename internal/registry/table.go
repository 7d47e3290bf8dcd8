package registry

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// tableConvertor renders `kubectl get`: NAME, the kind's own columns, AGE.
type tableConvertor struct {
	kind kindInfo
	// lastHeard is the server's in-memory liveness, for kinds with HeardCells.
	lastHeard func(name string) time.Time
}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name of the object."}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "date", Description: "Time since the object was created."}
)

func (c tableConvertor) ConvertToTable(_ context.Context, object runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{
		ColumnDefinitions: append(append(append([]metav1.TableColumnDefinition{nameColumn}, c.kind.columns...), ageColumn), c.kind.wideColumns...),
	}
	if lm, err := meta.ListAccessor(object); err == nil {
		table.ResourceVersion = lm.GetResourceVersion()
		table.Continue = lm.GetContinue()
		table.RemainingItemCount = lm.GetRemainingItemCount()
	}
	var rowErr error
	add := func(obj runtime.Object) error {
		o, ok := obj.(Object)
		if !ok {
			return fmt.Errorf("cannot show %T as a %s", obj, c.kind.singular)
		}
		cells := []interface{}{o.GetName()}
		switch {
		case c.kind.heardCells != nil:
			var heard time.Time
			if c.lastHeard != nil {
				heard = c.lastHeard(o.GetName())
			}
			cells = append(cells, c.kind.heardCells(obj, heard)...)
		case c.kind.cells != nil:
			cells = append(cells, c.kind.cells(obj)...)
		}
		cells = append(cells, age(o.GetCreationTimestamp()))
		if c.kind.wideCells != nil {
			cells = append(cells, c.kind.wideCells(obj)...)
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		rowErr = meta.EachListItem(object, add)
	} else {
		rowErr = add(object)
	}
	return table, rowErr
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// since renders an optional timestamp the way AGE is rendered.
func since(t *metav1.Time) string {
	if t == nil {
		return "<never>"
	}
	return duration.HumanDuration(time.Since(t.Time)) + " ago"
}
