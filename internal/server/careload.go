package server

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/pki"
)

// caRecheck bounds how long a rotation can go unseen if the datastore's
// watch misses it (a dropped watch is re-made, and the key read again).
const caRecheck = 30 * time.Second

// caReloader makes a CA rotation ('muster-server certificate rotate-ca',
// its --retire) reach this running server: it watches the sealed CA record
// in the datastore and, when it changes, installs it in the data dir and
// re-runs bootstrap.Ensure, which rewrites the CA bundle (/cacerts and the
// client CA file the API server reloads), re-issues the serving and admin
// certificates from the CA they must now come from (the API server reloads
// its serving certificate from the file; open connections keep the
// certificate they were made with), and then apply swaps what is held in
// memory: the CA that signs agents' certificates, the bundle /cacerts
// serves, the peer TLS.
//
// Only what the server token opens is taken: the record is sealed with
// AES-GCM under a key derived from the token, and its key lies outside the
// API's key space, so no API client can write it; a record that does not
// open (another token, tampered bytes) is refused and logged, and the
// server keeps the CA it has.
type caReloader struct {
	client  *clientv3.Client
	token   string
	dataDir string
	ensure  func() (*bootstrap.State, error)
	apply   func(*bootstrap.State) error
	current atomic.Pointer[bootstrap.State]
	// last is the record last looked at: the same bytes again (the
	// periodic re-read) are not opened again, which costs a key derivation,
	// nor logged again when refused.
	last []byte
}

func (r *caReloader) run(ctx context.Context) {
	for ctx.Err() == nil {
		rev := r.check(ctx)
		wctx, cancel := context.WithTimeout(ctx, caRecheck)
		opts := []clientv3.OpOption{}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		began := time.Now()
		for resp := range r.client.Watch(clientv3.WithRequireLeader(wctx), bootstrap.SharedCAKey, opts...) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					r.reload(ev.Kv.Value)
				}
			}
		}
		cancel()
		// A watch the datastore ends at once (unreachable, compacted) is
		// not re-made in a tight loop.
		if time.Since(began) < time.Second {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// check reads the record once (at start and after each watch ends) and
// reloads if it changed; it returns the revision read, 0 on failure.
func (r *caReloader) check(ctx context.Context) int64 {
	gctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := r.client.Get(gctx, bootstrap.SharedCAKey)
	if err != nil {
		if ctx.Err() == nil {
			klog.ErrorS(err, "Cannot read the sealed cluster CA to look for a CA rotation; trying again", "key", bootstrap.SharedCAKey)
		}
		return 0
	}
	if len(resp.Kvs) > 0 {
		r.reload(resp.Kvs[0].Value)
	}
	return resp.Header.Revision
}

func (r *caReloader) reload(blob []byte) {
	if bytes.Equal(blob, r.last) {
		return
	}
	r.last = bytes.Clone(blob)
	shared, err := bootstrap.OpenCA(r.token, blob)
	if errors.Is(err, bootstrap.ErrWrongToken) {
		klog.ErrorS(nil, "The sealed cluster CA in the datastore changed and this server's token does not open it (the server token was rotated, or the record was tampered with): "+
			"this server keeps the CA it has; restart it with the deployment's current token", "key", bootstrap.SharedCAKey)
		return
	}
	if err != nil {
		klog.ErrorS(err, "The sealed cluster CA in the datastore changed and cannot be used: this server keeps the CA it has")
		return
	}
	cur := r.current.Load()
	var curRetiring []byte
	if cur.Retiring != nil {
		curRetiring = cur.Retiring.CertPEM
	}
	var retiring []byte
	if shared.Retiring != nil {
		retiring = shared.Retiring.CertPEM
	}
	if bytes.Equal(shared.CertPEM, cur.CA.CertPEM) && bytes.Equal(retiring, curRetiring) {
		return
	}
	if err := bootstrap.InstallCA(r.dataDir, shared, false); err != nil {
		// Tried again at the next read of the record (caRecheck).
		r.last = nil
		klog.ErrorS(err, "Cannot install the rotated cluster CA: this server keeps the CA it has and tries again; restart it to take the new one now")
		return
	}
	state, err := r.ensure()
	if err == nil {
		err = r.apply(state)
	}
	if err != nil {
		r.last = nil
		klog.ErrorS(err, "Cannot take the rotated cluster CA: this server tries again; restart it to take the new one now")
		return
	}
	r.current.Store(state)
	if state.Retiring != nil {
		klog.InfoS("Took the rotated cluster CA without a restart: it signs from now on, and the previous CA stays trusted until 'muster-server certificate rotate-ca --retire'",
			"hash", pki.Hash(state.CA.CertPEM), "retiring", pki.Hash(state.Retiring.CertPEM))
	} else {
		klog.InfoS("Took the cluster CA without a restart: it alone is trusted from now on", "hash", pki.Hash(state.CA.CertPEM))
	}
}
