package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// sentStream records what a watch stream sends.
type sentStream struct {
	grpc.ServerStream
	sent []string
}

func (s *sentStream) SendMsg(m any) error {
	r := m.(*etcdserverpb.WatchResponse)
	s.sent = append(s.sent, describe(r))
	return nil
}

func describe(r *etcdserverpb.WatchResponse) string {
	switch {
	case r.Created && r.Canceled:
		return fmt.Sprintf("early-cancel %d", r.WatchId)
	case r.Created:
		return fmt.Sprintf("created %d", r.WatchId)
	case r.Canceled:
		return fmt.Sprintf("canceled %d", r.WatchId)
	case len(r.Events) > 0:
		return fmt.Sprintf("events %d", r.WatchId)
	default:
		return fmt.Sprintf("progress %d @%d", r.WatchId, r.Header.GetRevision())
	}
}

func TestProgressPerWatch(t *testing.T) {
	header := &etcdserverpb.ResponseHeader{Revision: 42}
	progress := &etcdserverpb.WatchResponse{Header: header, WatchId: clientv3.InvalidWatchID}
	cases := []struct {
		name string
		send []*etcdserverpb.WatchResponse
		want []string
	}{
		{
			name: "a broadcast reaches every open watch, never a cancelled one",
			send: []*etcdserverpb.WatchResponse{
				{WatchId: 0, Created: true}, {WatchId: 1, Created: true}, {WatchId: 2, Created: true},
				{WatchId: 1, Canceled: true, CancelReason: "slow reader"},
				progress,
			},
			want: []string{"created 0", "created 1", "created 2", "canceled 1", "progress 0 @42", "progress 2 @42"},
		},
		{
			name: "a broadcast with no open watch sends nothing",
			send: []*etcdserverpb.WatchResponse{{WatchId: 0, Created: true}, {WatchId: 0, Canceled: true}, progress},
			want: []string{"created 0", "canceled 0"},
		},
		{
			name: "per-watch progress and events pass as they are",
			send: []*etcdserverpb.WatchResponse{
				{WatchId: 3, Created: true},
				{Header: header, WatchId: 3},
				{Header: header, WatchId: 3, Events: make([]*mvccpb.Event, 1)},
			},
			want: []string{"created 3", "progress 3 @42", "events 3"},
		},
		{
			name: "an early cancel (no watch ID) passes as it is",
			send: []*etcdserverpb.WatchResponse{{WatchId: clientv3.InvalidWatchID, Created: true, Canceled: true, CancelReason: "no"}},
			want: []string{"early-cancel -1"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &sentStream{}
			err := progressPerWatch(nil, rec, &grpc.StreamServerInfo{FullMethod: watchMethod}, func(_ any, ss grpc.ServerStream) error {
				for _, r := range c.send {
					if err := ss.SendMsg(r); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rec.sent, c.want) {
				t.Errorf("sent %q\nwant %q", rec.sent, c.want)
			}
		})
	}
}

// Against kine and etcd's own client: after one of two watches is
// cancelled, a progress request still reaches the other, as a progress
// notification at the current revision.
func TestProgressRequestAfterCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, err := Open(ctx, Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: ds.Transport().ServerList, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	put, err := c.Put(ctx, "/registry/x", "1")
	if err != nil {
		t.Fatal(err)
	}
	// Both on one stream, as the apiserver's watches share one.
	wctx := clientv3.WithRequireLeader(ctx)
	gone, stop := context.WithCancel(wctx)
	kept := c.Watch(wctx, "/registry/a", clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithRev(put.Header.Revision+1))
	dropped := c.Watch(gone, "/registry/b", clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithRev(put.Header.Revision+1))
	stop()
	for range dropped {
	}
	if err := c.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	// Well before kine's own progress tick (every 5 s), so that it is
	// the answer to the request that arrives.
	answer := time.After(2 * time.Second)
	for {
		select {
		case r, ok := <-kept:
			if !ok {
				t.Fatal("the kept watch closed")
			}
			if r.IsProgressNotify() {
				if r.Header.Revision < put.Header.Revision {
					t.Fatalf("progress at revision %d, want at least %d", r.Header.Revision, put.Header.Revision)
				}
				return
			}
		case <-answer:
			t.Fatal("no progress notification reached the kept watch within 2 s of the request")
		}
	}
}
