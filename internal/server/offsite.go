package server

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/snapshot/s3store"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ReasonSnapshotUploadFailed is the Event reason of a scheduled snapshot
// that did not reach object storage.
const ReasonSnapshotUploadFailed = "SnapshotUploadFailed"

// offsite uploads each scheduled snapshot to object storage. A failure is
// logged, counted (muster_snapshot_upload_failures_total, which the
// MusterSnapshotUploadFailing alert watches) and recorded as an Event on
// this server's ServerEndpoint; the server and the schedule go on, and the
// local snapshot stays.
type offsite struct {
	store  *s3store.Store
	keep   int
	events record.EventRecorder
	self   string
}

// offsiteStore checks the object storage configuration (the credentials
// file's mode and content, the endpoint's form), so that a server started
// with a wrong one says so before anything is generated; nil when no
// bucket is configured. It does not reach the store: an unreachable store
// must not keep a server from starting.
func offsiteStore(cfg Config) (*s3store.Store, error) {
	if !cfg.SnapshotS3.Enabled() {
		return nil, nil
	}
	if cfg.SnapshotInterval <= 0 {
		return nil, fmt.Errorf("--snapshot-s3-bucket is set but --snapshot-interval is not: give --snapshot-interval (e.g. 12h) for scheduled snapshots to reach the bucket, or use muster-server datastore snapshot s3://BUCKET/PREFIX/ for one now")
	}
	s, err := s3store.New(cfg.SnapshotS3)
	if err != nil {
		return nil, fmt.Errorf("--snapshot-s3-*: %w", err)
	}
	return s, nil
}

// newOffsite is the Uploader of the scheduled snapshots; nil without a store.
func newOffsite(cfg Config, s *s3store.Store, events record.EventRecorder, self string) snapshot.Uploader {
	if s == nil {
		return nil
	}
	klog.InfoS("Scheduled snapshots are uploaded to object storage", "to", cfg.SnapshotS3.Where(), "endpoint", cfg.SnapshotS3.Endpoint, "keep", cfg.SnapshotRetention)
	return &offsite{store: s, keep: cfg.SnapshotRetention, events: events, self: self}
}

// uploadTimeout bounds one scheduled upload, retention included, so that a
// store that stops answering mid-request cannot hold the schedule forever.
const uploadTimeout = time.Hour

func (o *offsite) Upload(ctx context.Context, file string) {
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	up, removed, err := o.store.UploadScheduled(ctx, file, o.keep)
	if err != nil {
		if parent.Err() != nil {
			return // the server is stopping
		}
		metrics.SnapshotUploadFailed()
		klog.ErrorS(err, "Uploading the scheduled snapshot to object storage failed; the local copy stays, the next one is uploaded at the next interval", "file", file, "to", o.store.Config().Where())
		ref := &corev1.ObjectReference{APIVersion: api.SchemeGroupVersion.String(), Kind: "ServerEndpoint", Name: o.self}
		o.events.Eventf(ref, corev1.EventTypeWarning, ReasonSnapshotUploadFailed, "scheduled snapshot %s was not uploaded to %s: %v", filepath.Base(file), o.store.Config().Where(), err)
		return
	}
	metrics.SnapshotUploaded()
	klog.InfoS("Scheduled snapshot uploaded", "to", o.store.URL(filepath.Base(file)), "bytes", up.Bytes, "verified", up.Verified, "sha256", up.SHA256, "pruned", len(removed), "took", time.Since(start).Round(time.Millisecond))
}
