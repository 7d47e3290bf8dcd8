// Package validation holds the checks of the muster.io API types, one file
// per kind, as Kubernetes keeps pkg/apis/<group>/validation apart from the
// REST storage that calls it. The storage strategies (internal/registry)
// run these functions on every write; everything here is a pure function
// of the objects it is given, so it is tested without a server.
//
// The functions follow Kubernetes' naming:
//
//   - ValidateX(obj) checks a whole object's spec, on create and on every
//     update of the main resource.
//   - ValidateXUpdate(obj, old) checks what an update may not change
//     (immutable fields), in addition to ValidateX.
//   - ValidateXStatusUpdate(obj, old) bounds a write of the status
//     subresource. Which status fields a machine's agent may write, and
//     whether a phase change is a legal event of the kind's state machine,
//     are the strategy's business: they depend on who writes.
//
// Object metadata (name, labels, annotations) is checked by the strategy
// with apimachinery's own ObjectMeta validation, for every kind alike.
//
// Each error names the field and says what is allowed, so that the 422 a
// client gets tells the operator how to fix the object; an error never
// quotes a value that may be a secret (plan arguments, environment, file
// contents).
package validation
