package store

import (
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// watchMethod is the etcd gRPC method of every watch stream.
const watchMethod = "/etcdserverpb.Watch/Watch"

// progressPerWatch sends kine's broadcast progress notification (watch
// ID -1: its answer to the apiserver's RequestWatchProgress, which a
// consistent list served from the watch cache makes) as one notification
// addressed to each watch still open on the stream.
//
// etcd's client (v3.7.3; etcd-io/etcd#21969, open) panics with "send on
// closed channel" when a broadcast notification arrives between a cancel
// and its own bookkeeping of it: the cancel closes the watch's channel,
// but the watch stays in the set a broadcast is sent to until the watch's
// goroutine has noticed. kine cancels a watch whose reader falls 100
// batches behind, which a registration storm of thousands of agents did to
// the apiserver's own watch-cache reflectors; the next consistent list
// requested progress, and muster-server died of the panic mid-storm. A
// notification addressed to one watch reaches only that watch, and this
// stream addresses none to a watch it has cancelled; the client sees the
// same progress, once per watch, as it would have from the broadcast.
func progressPerWatch(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != watchMethod {
		return handler(srv, ss)
	}
	return handler(srv, &watchStream{ServerStream: ss, open: map[int64]bool{}})
}

// watchStream follows which watches are open on one watch stream.
type watchStream struct {
	grpc.ServerStream
	mu   sync.Mutex
	open map[int64]bool
}

func (s *watchStream) SendMsg(m any) error {
	r, ok := m.(*etcdserverpb.WatchResponse)
	if !ok {
		return s.ServerStream.SendMsg(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.WatchId == clientv3.InvalidWatchID:
		if r.Created || r.Canceled || len(r.Events) > 0 || r.CompactRevision != 0 {
			// Not a progress notification (kine's early cancel of a
			// watch it could not create): as it is.
			break
		}
		ids := make([]int64, 0, len(s.open))
		for id := range s.open {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if err := s.ServerStream.SendMsg(&etcdserverpb.WatchResponse{Header: r.Header, WatchId: id}); err != nil {
				return err
			}
		}
		return nil
	case r.Canceled:
		delete(s.open, r.WatchId)
	case r.Created:
		s.open[r.WatchId] = true
	}
	return s.ServerStream.SendMsg(m)
}
