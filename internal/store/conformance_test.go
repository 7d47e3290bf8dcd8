package store

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"

	"github.com/muster-io/muster/internal/testenv/etcdtest"
	"github.com/muster-io/muster/internal/testenv/pgtest"
)

// The upstream storage conformance suite (k8s.io/apiserver/pkg/storage/testing)
// run against the storage.Interface the apiserver builds on our datastore:
// kine on a real SQLite file and on a real PostgreSQL. These are the same
// checks etcd3's own store passes, so a kine behaviour the apiserver relies
// on cannot regress unnoticed.

var (
	exampleScheme = runtime.NewScheme()
	exampleCodecs = serializer.NewCodecFactory(exampleScheme)
)

func init() {
	metav1.AddToGroupVersion(exampleScheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(exampleScheme))
	utilruntime.Must(examplev1.AddToScheme(exampleScheme))
}

// conformance lists the upstream tests that need nothing from etcd3's
// internals (prefix transformers, KV recorders, etcd compaction helpers).
var conformance = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, s storage.Interface, c *clientv3.Client)
}{
	{"Create", func(ctx context.Context, t *testing.T, s storage.Interface, c *clientv3.Client) {
		storagetesting.RunTestCreate(ctx, t, s, keyStored(c))
	}},
	{"CreateWithTTL", func(ctx context.Context, t *testing.T, s storage.Interface, _ *clientv3.Client) {
		storagetesting.RunTestCreateWithTTL(ctx, t, s)
	}},
	{"CreateWithKeyExist", wrap(storagetesting.RunTestCreateWithKeyExist)},
	{"Get", wrap(storagetesting.RunTestGet)},
	{"UnconditionalDelete", wrap(storagetesting.RunTestUnconditionalDelete)},
	{"ConditionalDelete", wrap(storagetesting.RunTestConditionalDelete)},
	{"DeleteWithSuggestion", wrap(storagetesting.RunTestDeleteWithSuggestion)},
	{"DeleteWithSuggestionAndConflict", wrap(storagetesting.RunTestDeleteWithSuggestionAndConflict)},
	{"DeleteWithConflict", wrap(storagetesting.RunTestDeleteWithConflict)},
	{"DeleteWithSuggestionOfDeletedObject", wrap(storagetesting.RunTestDeleteWithSuggestionOfDeletedObject)},
	{"ValidateDeletionWithSuggestion", wrap(storagetesting.RunTestValidateDeletionWithSuggestion)},
	{"ValidateDeletionWithOnlySuggestionValid", wrap(storagetesting.RunTestValidateDeletionWithOnlySuggestionValid)},
	{"PreconditionalDeleteWithSuggestion", wrap(storagetesting.RunTestPreconditionalDeleteWithSuggestion)},
	{"PreconditionalDeleteWithOnlySuggestionPass", wrap(storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass)},
	{"GetListRecursivePrefix", wrap(storagetesting.RunTestGetListRecursivePrefix)},
	{"ListContinuationWithFilter", func(ctx context.Context, t *testing.T, s storage.Interface, _ *clientv3.Client) {
		storagetesting.RunTestListContinuationWithFilter(ctx, t, s, noCallsValidation)
	}},
	{"ListPaginationRareObject", func(ctx context.Context, t *testing.T, s storage.Interface, _ *clientv3.Client) {
		storagetesting.RunTestListPaginationRareObject(ctx, t, s, noCallsValidation)
	}},
	{"ListContinuation", func(ctx context.Context, t *testing.T, s storage.Interface, _ *clientv3.Client) {
		storagetesting.RunTestListContinuation(ctx, t, s, noCallsValidation)
	}},
	{"ListPaging", wrap(storagetesting.RunTestListPaging)},
	{"NamespaceScopedList", wrap(storagetesting.RunTestNamespaceScopedList)},
	{"GuaranteedUpdateWithTTL", wrap(storagetesting.RunTestGuaranteedUpdateWithTTL)},
	{"GuaranteedUpdateWithConflict", wrap(storagetesting.RunTestGuaranteedUpdateWithConflict)},
	{"GuaranteedUpdateWithSuggestionAndConflict", wrap(storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict)},
	{"Watch", wrap(storagetesting.RunTestWatch)},
	{"DeleteTriggerWatch", wrap(storagetesting.RunTestDeleteTriggerWatch)},
	{"WatchFromNonZero", wrap(storagetesting.RunTestWatchFromNonZero)},
	{"DelayedWatchDelivery", wrap(storagetesting.RunTestDelayedWatchDelivery)},
	{"WatchContextCancel", wrap(storagetesting.RunTestWatchContextCancel)},
	{"WatcherTimeout", wrap(storagetesting.RunTestWatcherTimeout)},
	{"WatchDeleteEventObjectHaveLatestRV", wrap(storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV)},
	{"WatchInitializationSignal", wrap(storagetesting.RunTestWatchInitializationSignal)},
	{"ClusterScopedWatch", wrap(storagetesting.RunTestClusterScopedWatch)},
	{"NamespaceScopedWatch", wrap(storagetesting.RunTestNamespaceScopedWatch)},
}

func wrap(f func(context.Context, *testing.T, storage.Interface)) func(context.Context, *testing.T, storage.Interface, *clientv3.Client) {
	return func(ctx context.Context, t *testing.T, s storage.Interface, _ *clientv3.Client) { f(ctx, t, s) }
}

// noCallsValidation: counting etcd calls needs etcd3's KV recorder; the
// results of every page are still checked by the suite itself.
func noCallsValidation(*testing.T, uint64, uint64) {}

// keyStored checks the object really landed in the datastore under its key.
func keyStored(c *clientv3.Client) storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		resp, err := c.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s from kine: %v", key, err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("key %s not stored (found %d)", key, len(resp.Kvs))
		}
	}
}

func TestUpstreamStorageConformance(t *testing.T) {
	backends := []struct {
		name   string
		config func(t *testing.T) Config
	}{
		{"sqlite", func(*testing.T) Config { return Config{} }},
		{"postgres", func(t *testing.T) Config { return Config{Endpoint: pgtest.DSN(t)} }},
		// A real etcd behind TLS: the apiserver's storage on etcd directly,
		// so what passes on kine is checked against the store it emulates.
		{"etcd", func(t *testing.T) Config {
			e := etcdtest.Start(t)
			return Config{Endpoint: e.Endpoint, TLS: TLSFiles{CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}}
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) {
					// Cancelled at cleanup, not on return: some suites run
					// parallel subtests that outlive the function body.
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					t.Cleanup(cancel)
					s, client := openConformanceStore(t, ctx, b.config(t))
					tc.run(ctx, t, s, client)
				})
			}
		})
	}
}

// openConformanceStore opens a fresh datastore and the apiserver's etcd3
// storage on it, for the example API's pods.
func openConformanceStore(t *testing.T, ctx context.Context, c Config) (storage.Interface, *clientv3.Client) {
	t.Helper()
	c.DataDir, c.PollInterval = t.TempDir(), 100*time.Millisecond
	ds, err := Open(ctx, c)
	if err != nil {
		t.Fatalf("open datastore: %v", err)
	}
	t.Cleanup(func() { _ = ds.Close() })

	codec := exampleCodecs.LegacyCodec(examplev1.SchemeGroupVersion)
	cfg := storagebackend.NewDefaultConfig("/", codec)
	cfg.Transport = ds.Transport()
	cfg.CompactionInterval = APIServerCompactionInterval
	s, destroy, err := factory.Create(*cfg.ForResource(example.Resource("pods")),
		func() runtime.Object { return &example.Pod{} }, func() runtime.Object { return &example.PodList{} }, "/pods/")
	if err != nil {
		t.Fatalf("etcd3 storage on the datastore: %v", err)
	}
	t.Cleanup(destroy)

	client, err := ds.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return s, client
}

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel)
	// The PostgreSQL server pgtest may start is stopped when the tests end.
	exit(pgtest.Main(m.Run))
}
