package registry

import (
	"fmt"
	"io"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// MaxObjectBytes bounds one stored object of any kind, encoded as the
// datastore keeps it. The datastore's own bound is about 2 MiB (the gRPC
// message size between the apiserver and kine or etcd), past which it
// answered with a misleading 503; 1 MiB leaves room for the request's
// framing and is far more than any muster object needs (a plan's strings
// are bounded at 512 KiB, an agent's status at 256 KiB).
const MaxObjectBytes = 1 << 20

// MaxRequestBodyBytes bounds a request's body; the apiserver answers 413
// past it, before decoding. A body may be larger than the object it makes
// (YAML, indentation, a patch carrying a value twice), hence twice the
// object bound; the object bound still holds for what is stored.
const MaxRequestBodyBytes = 2 * MaxObjectBytes

// LimitObjectSize wraps the storage codec so that every write of every
// kind (creates, updates, patches, status updates, the server's own
// writes) is refused with 413 when the object it stores would exceed
// MaxObjectBytes. Measuring the encoding the datastore receives costs no
// second encoding and cannot disagree with what would be stored.
func LimitObjectSize(c runtime.Codec) runtime.Codec { return sizeLimitedCodec{Codec: c} }

type sizeLimitedCodec struct{ runtime.Codec }

func (c sizeLimitedCodec) Encode(obj runtime.Object, w io.Writer) error {
	cw := &countingWriter{w: w}
	if err := c.Codec.Encode(obj, cw); err != nil {
		return err
	}
	if cw.n > MaxObjectBytes && !beingDeleted(obj) {
		return objectTooLarge(obj, cw.n)
	}
	return nil
}

// beingDeleted: an object stored before the bound existed may be larger;
// once it is being deleted its finalizers must still be removable, or it
// could never go (a Machine's lifecycle finalizer). Such a write only
// takes the object towards removal.
func beingDeleted(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetDeletionTimestamp() != nil
}

func objectTooLarge(obj runtime.Object, n int64) error {
	what := reflect.Indirect(reflect.ValueOf(obj)).Type().Name()
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != "" {
		what = gvk.Kind
	}
	if m, err := meta.Accessor(obj); err == nil {
		what += fmt.Sprintf(" %q", m.GetName())
	}
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
		"%s would take %d bytes in the datastore, and an object may take at most %d (1 MiB): "+
			"make it smaller (a plan can download large files instead of carrying them)", what, n, MaxObjectBytes))
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
