package watchcache

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// below is the storage under the guard: it records what reached it.
type below struct {
	storage.Interface
	reached int
}

func (b *below) Watch(context.Context, string, storage.ListOptions) (watch.Interface, error) {
	b.reached++
	return watch.NewEmptyWatch(), nil
}

func (b *below) GetList(context.Context, string, storage.ListOptions, runtime.Object) error {
	b.reached++
	return nil
}

// TestRevisionGuard: a watch or list from a version the datastore has not
// reached (a client that saw the datastore before it was restored from an
// older snapshot) is answered with what makes client-go list again — 410
// Expired for a watch, "Too large resource version" for a list — while
// every version the datastore has reached goes through, and the datastore
// is asked only for versions past the watch cache's.
func TestRevisionGuard(t *testing.T) {
	tests := []struct {
		name      string
		version   string
		match     metav1.ResourceVersionMatch
		cached    uint64 // the watch cache's revision
		datastore uint64 // the datastore's current revision
		refused   bool
		reads     int // reads of the datastore's revision
	}{
		{name: "no version", version: "", cached: 10, datastore: 10},
		{name: "version 0", version: "0", cached: 10, datastore: 10},
		{name: "a version the cache has", version: "10", cached: 10, datastore: 12},
		{name: "ahead of a lagging cache, not of the datastore (HA)", version: "12", cached: 10, datastore: 12, reads: 1},
		{name: "ahead of the datastore: restored from an older snapshot", version: "500", cached: 100, datastore: 120, refused: true, reads: 1},
		{name: "an exact list is the storage's to answer", version: "500", match: metav1.ResourceVersionMatchExact, cached: 100, datastore: 120},
		{name: "the cache not ready yet", version: "50", cached: 0, datastore: 120, reads: 1},
	}
	for _, tc := range tests {
		for _, op := range []string{"watch", "list"} {
			if op == "watch" && tc.match != "" {
				continue
			}
			t.Run(tc.name+"/"+op, func(t *testing.T) {
				b := &below{}
				reads := 0
				g := &revisionGuard{Interface: b, resource: "machineplans.muster.io",
					cached:  func() uint64 { return tc.cached },
					current: func(context.Context) (uint64, error) { reads++; return tc.datastore, nil },
				}
				opts := storage.ListOptions{ResourceVersion: tc.version, ResourceVersionMatch: tc.match}
				var err error
				if op == "watch" {
					_, err = g.Watch(context.Background(), "/k", opts)
				} else {
					err = g.GetList(context.Background(), "/k", opts, nil)
				}
				switch {
				case tc.refused && op == "watch" && !apierrors.IsResourceExpired(err):
					t.Errorf("watch from %s: %v, want 410 Expired", tc.version, err)
				case tc.refused && op == "list" && !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
					t.Errorf("list at %s: %v, want Too large resource version", tc.version, err)
				case tc.refused && op == "list":
					// No Retry-After: client-go would ask again at the same
					// version ten times before listing afresh.
					if s, ok := apierrors.SuggestsClientDelay(err); ok {
						t.Errorf("list at %s: suggests a retry after %ds", tc.version, s)
					}
				case !tc.refused && err != nil:
					t.Errorf("%s at %s: %v, want it served", op, tc.version, err)
				}
				if tc.refused && b.reached != 0 {
					t.Errorf("a refused %s reached the storage", op)
				}
				if !tc.refused && b.reached != 1 {
					t.Errorf("a %s the datastore can serve did not reach the storage", op)
				}
				if reads != tc.reads {
					t.Errorf("%d reads of the datastore's revision, want %d", reads, tc.reads)
				}
			})
		}
	}
}

// TestRevisionGuardRemembers: once the datastore was read at a revision,
// versions up to it go through without reading it again; a failed read is
// the request's error.
func TestRevisionGuardRemembers(t *testing.T) {
	b := &below{}
	reads := 0
	fail := false
	g := &revisionGuard{Interface: b, resource: "machines.muster.io",
		cached: func() uint64 { return 5 },
		current: func(context.Context) (uint64, error) {
			reads++
			if fail {
				return 0, errors.New("datastore down")
			}
			return 100, nil
		},
	}
	for _, v := range []string{"50", "99", "100", "60"} {
		if _, err := g.Watch(context.Background(), "/k", storage.ListOptions{ResourceVersion: v}); err != nil {
			t.Fatalf("watch from %s: %v", v, err)
		}
	}
	if reads != 1 {
		t.Errorf("%d reads of the datastore's revision, want 1", reads)
	}
	fail = true
	if _, err := g.Watch(context.Background(), "/k", storage.ListOptions{ResourceVersion: "101"}); err == nil || apierrors.IsResourceExpired(err) {
		t.Errorf("a watch the datastore could not be asked about: %v, want the datastore's error", err)
	}
}
