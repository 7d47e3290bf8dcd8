// Package watchcache serves every page of a paginated list from the
// apiserver's watch cache while bounding what that costs in memory.
//
// k8s.io/apiserver (ListFromCacheSnapshot) keeps a copy-on-write snapshot
// of a resource's cache after every event, so that a list's continue pages
// read the same revision as its first page without going to the
// datastore. It drops a snapshot only when its event leaves the watch
// history or when the datastore is compacted: after a registration storm,
// an idle fleet would keep every snapshot of the storm (~50 MiB at 5,000
// agents) for as long as nothing else happens. Here a Trimmer drops the
// snapshots older than Keep instead, but never a resource's newest one, so
// a list of an idle resource still pages from memory. A continue token
// older than Keep is served from the datastore, as kube-apiserver does for
// one older than its history: slower, never wrong.
package watchcache

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Keep is how long a list snapshot is kept: far longer than a client takes
// to walk a paginated list of tens of thousands of objects, far shorter
// than a storm's aftermath.
const Keep = 60 * time.Second

// period is how often snapshots are trimmed.
const period = 10 * time.Second

// Trimmer builds the resources' watch caches and trims their list
// snapshots. The zero value is not usable; use NewTrimmer.
type Trimmer struct {
	keep time.Duration

	mu     sync.Mutex
	caches []*resourceCache
}

// NewTrimmer returns a Trimmer that keeps snapshots for keep.
func NewTrimmer(keep time.Duration) *Trimmer { return &Trimmer{keep: keep} }

// resourceCache is one resource's cacher and what trimming needs of it.
type resourceCache struct {
	resource string
	cacher   *cacherstorage.Cacher
	prefix   string

	mu sync.Mutex
	// newest is the resource version of the newest event the cache has
	// shown: the cache holds a snapshot at it, which trimming keeps.
	newest uint64
	// samples are newest as it was at each trim, oldest first.
	samples []sample
	// trimmed is the revision snapshots were last trimmed below.
	trimmed uint64
}

type sample struct {
	at time.Time
	rv uint64
}

// RESTOptionsGetter wraps g so that every resource it configures with a
// watch cache gets one whose snapshots t trims.
func (t *Trimmer) RESTOptionsGetter(g generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	return getter{next: g, t: t}
}

type getter struct {
	next generic.RESTOptionsGetter
	t    *Trimmer
}

func (g getter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.next.GetRESTOptions(resource, example)
	if err != nil || opts.Decorator == nil {
		return opts, err
	}
	opts.Decorator = g.t.decorate
	return opts, nil
}

// decorate builds a resource's storage as genericregistry.StorageWithCacher
// does, keeping the cacher so that its snapshots can be trimmed.
func (t *Trimmer) decorate(config *storagebackend.ConfigForResource, resourcePrefix string,
	keyFunc func(runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
	getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	raw, destroyRaw, err := generic.NewRawStorage(config, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		return raw, destroyRaw, err
	}
	cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
		Storage: raw, Versioner: storage.APIObjectVersioner{}, GroupResource: config.GroupResource,
		EventsHistoryWindow: config.EventsHistoryWindow, ResourcePrefix: resourcePrefix,
		KeyFunc: keyFunc, NewFunc: newFunc, NewListFunc: newListFunc, GetAttrsFunc: getAttrs,
		IndexerFuncs: triggers, Indexers: indexers, Codec: config.Codec,
	})
	if err != nil {
		destroyRaw()
		return nil, func() {}, err
	}
	delegator := cacherstorage.NewCacheDelegator(cacher, raw)
	rc := &resourceCache{resource: config.GroupResource.String(), cacher: cacher, prefix: resourcePrefix}
	ctx, stop := context.WithCancel(context.Background())
	go rc.followEvents(ctx)
	t.mu.Lock()
	t.caches = append(t.caches, rc)
	t.mu.Unlock()
	guard := &revisionGuard{
		Interface: delegator, resource: rc.resource, current: raw.GetCurrentResourceVersion,
		cached: func() uint64 {
			if !cacher.Ready() {
				return 0 // LastSyncResourceVersion would wait for it: ask the datastore
			}
			rv, err := cacher.LastSyncResourceVersion()
			if err != nil {
				return 0
			}
			return rv
		},
	}
	var once sync.Once
	return guard, func() {
		once.Do(func() {
			stop()
			delegator.Stop()
			cacher.Stop()
			destroyRaw()
		})
	}, nil
}

// followEvents records the resource version of every event the cache
// shows, from a watch on the cache itself (in-process, no encoding).
func (rc *resourceCache) followEvents(ctx context.Context) {
	for ctx.Err() == nil {
		if err := rc.cacher.Wait(ctx); err != nil {
			return
		}
		from, err := rc.cacher.LastSyncResourceVersion()
		if err != nil {
			continue
		}
		w, err := rc.cacher.Watch(ctx, rc.prefix, storage.ListOptions{
			ResourceVersion: strconv.FormatUint(from, 10), Predicate: storage.Everything, Recursive: true,
		})
		if err != nil {
			klog.V(2).InfoS("Watching the watch cache to trim its list snapshots", "resource", rc.resource, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
				continue // a bookmark's revision has no snapshot
			}
			acc, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			if rv, err := strconv.ParseUint(acc.GetResourceVersion(), 10, 64); err == nil {
				rc.mu.Lock()
				rc.newest = max(rc.newest, rv)
				rc.mu.Unlock()
			}
		}
		w.Stop()
	}
}

// Run trims every resource's snapshots every period until ctx ends.
func (t *Trimmer) Run(ctx context.Context) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t.mu.Lock()
			caches := append([]*resourceCache(nil), t.caches...)
			t.mu.Unlock()
			for _, rc := range caches {
				if below := rc.trimPoint(now, t.keep); below > 0 {
					if err := rc.cacher.Compact(strconv.FormatUint(below, 10)); err != nil {
						klog.ErrorS(err, "Trimming list snapshots", "resource", rc.resource)
					}
				}
			}
		}
	}
}

// trimPoint records the newest event's revision as of now and returns the
// revision below which snapshots may go (0: none): the newest event's
// revision as it was keep ago. Snapshots taken since then stay, and so
// does the one at the newest event, however old, since the newest event
// then is at most the newest event now.
func (rc *resourceCache) trimPoint(now time.Time, keep time.Duration) uint64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.samples = append(rc.samples, sample{at: now, rv: rc.newest})
	var below uint64
	i := 0
	for ; i < len(rc.samples) && now.Sub(rc.samples[i].at) >= keep; i++ {
		below = rc.samples[i].rv
	}
	// The last sample at least keep old is kept: it is next time's point.
	if i > 1 {
		rc.samples = append(rc.samples[:0], rc.samples[i-1:]...)
	}
	if below <= rc.trimmed {
		return 0
	}
	rc.trimmed = below
	return below
}
