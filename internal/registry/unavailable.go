package registry

import (
	"context"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/metrics"
)

// unavailableStorage turns a datastore that does not answer into 503
// Service Unavailable with Retry-After, instead of the 500 carrying a raw
// driver message that the generic store would send. Clients (client-go,
// kubectl, agents) retry a 503 by themselves; a 500 reads as a bug.
type unavailableStorage struct {
	storage.Interface
	resource string
}

func (s unavailableStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return s.translate("create", s.Interface.Create(ctx, key, obj, out, ttl))
}

func (s unavailableStorage) Delete(ctx context.Context, key string, out runtime.Object, pre *storage.Preconditions, v storage.ValidateObjectFunc, cached runtime.Object, opts storage.DeleteOptions) error {
	var own error
	validate := v
	if v != nil {
		validate = func(ctx context.Context, obj runtime.Object) error {
			own = v(ctx, obj)
			return own
		}
	}
	err := s.Interface.Delete(ctx, key, out, pre, validate, cached, opts)
	if err != nil && errors.Is(err, own) {
		return err
	}
	return s.translate("delete", err)
}

func (s unavailableStorage) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	return s.translate("get", s.Interface.Get(ctx, key, opts, out))
}

func (s unavailableStorage) GetList(ctx context.Context, key string, opts storage.ListOptions, out runtime.Object) error {
	return s.translate("list", s.Interface.GetList(ctx, key, opts, out))
}

func (s unavailableStorage) GuaranteedUpdate(ctx context.Context, key string, out runtime.Object, ignoreNotFound bool, pre *storage.Preconditions, tryUpdate storage.UpdateFunc, cached runtime.Object) error {
	// Errors of the registry's own update function (validation, and the
	// generic store's signal that emptied finalizers mean delete) go back
	// to it untouched: only the datastore's own failures are translated.
	var own error
	update := func(in runtime.Object, meta storage.ResponseMeta) (runtime.Object, *uint64, error) {
		obj, ttl, err := tryUpdate(in, meta)
		own = err
		return obj, ttl, err
	}
	err := s.Interface.GuaranteedUpdate(ctx, key, out, ignoreNotFound, pre, update, cached)
	if err != nil && errors.Is(err, own) {
		return err
	}
	return s.translate("update", err)
}

// translate leaves alone what the API already explains (not found,
// conflicts, validation, any API status) and the caller's own cancellation.
func (s unavailableStorage) translate(operation string, err error) error {
	if err == nil || isExplained(err) {
		return err
	}
	metrics.DatastoreError(s.resource, operation)
	klog.V(2).InfoS("Datastore request failed", "resource", s.resource, "err", err)
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusServiceUnavailable,
		Reason: metav1.StatusReasonServiceUnavailable,
		Message: "the datastore is not answering, so the request could not be served and may not have been applied: " +
			"retry in a moment (/readyz turns ok when the datastore is back)",
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}
}

func isExplained(err error) bool {
	var status apierrors.APIStatus
	var serr *storage.StorageError
	switch {
	case errors.As(err, &serr):
		return serr.Code != storage.ErrCodeUnreachable
	case errors.As(err, &status):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return true
	case storage.IsInvalidObj(err), storage.IsInvalidError(err), storage.IsCorruptObject(err):
		return true
	}
	return false
}
