package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/store"
)

// prepareCertificates gives this server the deployment's CA, the one every
// server shares (sealed in the datastore with the server token) and its own
// serving and admin certificates issued from it. The first server on an
// empty datastore seals its CA there; later ones install it before their
// certificates are issued. A server whose token cannot open the sealed CA
// stops here, before anything on disk or in the datastore is written.
func prepareCertificates(ctx context.Context, cfg Config, ds *store.Datastore) (*bootstrap.State, error) {
	token := cfg.Token
	if token == "" {
		t, err := bootstrap.ReadToken(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		token = t
	}
	client, err := ds.Client()
	if err != nil {
		return nil, fmt.Errorf("connecting to the datastore: %w", err)
	}
	defer client.Close()

	shared, err := readSharedCA(ctx, client, token)
	if err != nil {
		return nil, err
	}
	if shared != nil {
		if err := bootstrap.InstallCA(cfg.DataDir, shared, false); err != nil {
			return nil, err
		}
	}
	ensure := func() (*bootstrap.State, error) { return ensureDataDir(cfg, token) }
	state, err := ensure()
	if err != nil || shared != nil {
		return state, err
	}

	// No sealed CA yet: seal ours, unless another server got there first.
	blob, err := bootstrap.SealCA(state.Token, state.CA)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	created, err := client.Txn(wctx).
		If(clientv3.Compare(clientv3.ModRevision(bootstrap.SharedCAKey), "=", 0)).
		Then(clientv3.OpPut(bootstrap.SharedCAKey, string(blob))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("storing the sealed CA in the datastore: %w", err)
	}
	if created.Succeeded {
		klog.InfoS("Sealed this server's CA into the datastore for the other servers to share", "hash", pki.Hash(state.CA.CertPEM))
		return state, nil
	}
	winner, err := readSharedCA(ctx, client, state.Token)
	if err != nil || winner == nil {
		return nil, errors.Join(errors.New("another server sealed its CA into the datastore at the same moment and it cannot be read back"), err)
	}
	if bytes.Equal(winner.CertPEM, state.CA.CertPEM) {
		return state, nil
	}
	if !state.GeneratedCA {
		return nil, bootstrap.InstallCA(cfg.DataDir, winner, false)
	}
	// Both servers started on an empty datastore; the other sealed first,
	// and the CA this start generated has signed nothing anyone holds yet.
	klog.InfoS("Another server sealed its CA first; using it instead of the one just generated")
	if err := bootstrap.InstallCA(cfg.DataDir, winner, true); err != nil {
		return nil, err
	}
	return ensure()
}

// ensureDataDir runs bootstrap.Ensure with the server's flags: at start,
// and again when a CA rotation reaches the running server (caReloader).
func ensureDataDir(cfg Config, token string) (*bootstrap.State, error) {
	return bootstrap.Ensure(bootstrap.Config{
		DataDir:          cfg.DataDir,
		AdvertiseAddress: cfg.AdvertiseAddress,
		BindAddress:      cfg.BindAddress,
		HTTPSPort:        cfg.HTTPSPort,
		TLSSANs:          cfg.TLSSANs,
		Token:            token,
	})
}

func readSharedCA(ctx context.Context, client *clientv3.Client, token string) (*bootstrap.SharedCA, error) {
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := client.Get(rctx, bootstrap.SharedCAKey)
	if err != nil {
		return nil, fmt.Errorf("reading the sealed cluster CA from the datastore: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	if token == "" {
		return nil, errors.New("this datastore is already used by muster servers, and this server has no server token: " +
			"start it with --token set to their token (the file 'token' in the first server's data dir)")
	}
	ca, err := bootstrap.OpenCA(token, resp.Kvs[0].Value)
	if errors.Is(err, bootstrap.ErrWrongToken) {
		return nil, errors.New("the datastore belongs to muster servers with a different server token, so this server cannot use their CA: " +
			"start it with --token set to their token (the file 'token' in the first server's data dir); nothing was changed")
	}
	return ca, err
}
