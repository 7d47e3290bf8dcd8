package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// filePrefix and fileSuffix name scheduled snapshots; retention touches
// only files named so.
const (
	filePrefix = "muster-"
	fileSuffix = ".snapshot"
)

// ScheduledPrefix and ScheduledSuffix are how scheduled snapshots are
// named, for an Uploader that keeps its own retention.
const (
	ScheduledPrefix = filePrefix
	ScheduledSuffix = fileSuffix
)

// An Uploader sends each scheduled snapshot somewhere else once it is
// complete on disk (s3store: object storage). It reports its own
// failures; the schedule goes on either way.
type Uploader interface {
	Upload(ctx context.Context, file string)
}

// Schedule takes a snapshot into dir every interval and keeps the newest
// keep of them, like k3s's etcd snapshots, and hands each to up (when not
// nil). It returns when ctx ends.
func Schedule(ctx context.Context, c *clientv3.Client, backend, dir string, every time.Duration, keep int, up Uploader, opts ...Option) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		klog.ErrorS(err, "Scheduled snapshots are off: cannot create their directory", "dir", dir)
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			file := filepath.Join(dir, filePrefix+now.UTC().Format("20060102T150405.000Z")+fileSuffix)
			res, err := Take(ctx, c, backend, file, opts...)
			if err != nil {
				if ctx.Err() == nil {
					klog.ErrorS(err, "Scheduled snapshot failed", "file", file)
				}
				continue
			}
			klog.InfoS("Scheduled snapshot taken", "file", file, "keys", res.Keys, "historyRows", res.HistoryRows, "revision", res.Revision, "bytes", res.Bytes, "took", res.Duration)
			if err := Prune(dir, keep); err != nil {
				klog.ErrorS(err, "Pruning scheduled snapshots", "dir", dir)
			}
			if up != nil {
				up.Upload(ctx, file)
			}
		}
	}
}

// Prune removes all but the newest keep scheduled snapshots in dir.
func Prune(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, filePrefix) && strings.HasSuffix(n, fileSuffix) && e.Type().IsRegular() {
			names = append(names, n)
		}
	}
	sort.Strings(names) // the time in the name sorts as text
	for len(names) > keep && keep > 0 {
		if err := os.Remove(filepath.Join(dir, names[0])); err != nil {
			return err
		}
		names = names[1:]
	}
	return nil
}
