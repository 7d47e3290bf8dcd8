package reconcile

import (
	"context"

	"k8s.io/client-go/util/workqueue"
)

// Work is the per-key shape, for controllers that decide one object at a
// time (a Machine's lifecycle, a registration's grant) rather than the
// whole fleet in a pass (Loop): it runs sync for each key q hands out
// until q shuts down. A key whose sync fails comes back rate-limited; one
// that succeeds is forgotten, so its next failure starts the backoff
// over. failed, if not nil, is told of each failure (to log it).
func Work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error, failed func(key string, err error)) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := sync(ctx, key); err != nil {
			if failed != nil {
				failed(key, err)
			}
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}
