package watchcache

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// revisionGuard answers a watch or a list at a resource version the
// datastore has not reached with "list again", where the watch cache would
// wait for it.
//
// A client can hold such a version only if the datastore went back: it was
// restored from a snapshot older than what the client last saw (or migrated
// from one). The watch cache accepts a watch from a future version and
// sends nothing until the datastore passes it, so every agent, controller
// and `kubectl get -w` would sit on a silent watch, missing every change
// meanwhile; a list would wait 3 s and then answer "Too large resource
// version". Instead a watch gets 410 Expired and a list the "Too large
// resource version" answer at once: client-go's reflectors then list again
// from the datastore as it is (resourceVersion "") and watch from there.
//
// The check costs nothing in the common case (a version the watch cache
// has already reached); only a version ahead of this server's cache (a
// client that moved from a server whose cache is ahead, or a restore) costs
// one read of the datastore's current revision.
type revisionGuard struct {
	storage.Interface
	// cached is the watch cache's revision: a version at or below it is known.
	cached func() uint64
	// current reads the datastore's revision.
	current func(ctx context.Context) (uint64, error)
	// resource names the resource in the answer.
	resource string
	// highest is the highest datastore revision read so far; a server's
	// datastore only goes forward while it runs (a restore needs every
	// server stopped).
	highest atomic.Uint64
}

// ahead returns the datastore's revision and true when rv is a version the
// datastore has not reached.
func (g *revisionGuard) ahead(ctx context.Context, version string) (uint64, bool, error) {
	if version == "" || version == "0" {
		return 0, false, nil
	}
	rv, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return 0, false, nil // the storage below answers a malformed version
	}
	if rv <= g.cached() || rv <= g.highest.Load() {
		return 0, false, nil
	}
	cur, err := g.current(ctx)
	if err != nil {
		return 0, false, err
	}
	for {
		h := g.highest.Load()
		if cur <= h || g.highest.CompareAndSwap(h, cur) {
			break
		}
	}
	return cur, rv > cur, nil
}

func (g *revisionGuard) why(version string, cur uint64) string {
	return fmt.Sprintf("resource version %s of %s is past the datastore's current revision %d: "+
		"the datastore was restored from (or moved to) an older copy; list again (resourceVersion \"\") to start from what it holds",
		version, g.resource, cur)
}

// Watch refuses a watch from a version the datastore has not reached with
// 410 Expired, the answer that makes a client list again.
func (g *revisionGuard) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	cur, ahead, err := g.ahead(ctx, opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	if ahead {
		return nil, apierrors.NewResourceExpired(g.why(opts.ResourceVersion, cur))
	}
	return g.Interface.Watch(ctx, key, opts)
}

// GetList answers a list at a version the datastore has not reached with
// "Too large resource version" at once, rather than after the watch
// cache's 3 s wait; client-go then lists with resourceVersion "".
func (g *revisionGuard) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if opts.ResourceVersionMatch != metav1.ResourceVersionMatchExact {
		cur, ahead, err := g.ahead(ctx, opts.ResourceVersion)
		if err != nil {
			return err
		}
		if ahead {
			return tooLarge(g.why(opts.ResourceVersion, cur))
		}
	}
	return g.Interface.GetList(ctx, key, opts, listObj)
}

// tooLarge is the apiserver's "Too large resource version" answer (504,
// cause ResourceVersionTooLarge) with msg as its message, and without the
// watch cache's Retry-After: the datastore will not reach the version in a
// second, and client-go would ask again at it ten times, a second apart,
// before listing from what the datastore holds.
func tooLarge(msg string) error {
	err := apierrors.NewTimeoutError(msg, 0)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}
