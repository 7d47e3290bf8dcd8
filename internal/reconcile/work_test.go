package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestWork: a failing key comes back until its sync succeeds, each failure
// is reported, and the worker ends when the queue shuts down.
func TestWork(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	var mu sync.Mutex
	calls, failures := map[string]int{}, map[string]int{}
	done := make(chan struct{})
	sync := func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		if key == "flaky" && calls[key] < 3 {
			return errors.New("not yet")
		}
		if calls["flaky"] == 3 && calls["steady"] == 1 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}
	ended := make(chan struct{})
	go func() {
		Work(context.Background(), q, sync, func(key string, _ error) { mu.Lock(); failures[key]++; mu.Unlock() })
		close(ended)
	}()
	q.Add("flaky")
	q.Add("steady")
	<-done
	q.ShutDown()
	<-ended
	mu.Lock()
	defer mu.Unlock()
	if calls["flaky"] != 3 || failures["flaky"] != 2 || calls["steady"] != 1 || failures["steady"] != 0 {
		t.Errorf("calls %v failures %v; want flaky synced 3 times with 2 failures, steady once", calls, failures)
	}
	if q.NumRequeues("flaky") != 0 {
		t.Errorf("a key that succeeded is still counted for backoff: %d requeues", q.NumRequeues("flaky"))
	}
}
