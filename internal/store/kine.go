package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	// The two backends Muster runs kine on register themselves here; kine's
	// endpoint package would also link NATS, MySQL, t4 and the rest, which
	// Muster never uses, into every server binary.
	_ "github.com/k3s-io/kine/pkg/drivers/pgsql"
	_ "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/server"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// kine is what serveKine needs: kine's own command-line defaults (its
// pkg/app), which its structs do not carry (zero values there fail or
// panic), and where to serve.
type kine struct {
	// dsn is kine's endpoint: sqlite://FILE?PARAMS or postgres://....
	dsn string
	// socket is the unix socket the apiserver's etcd3 client dials; 0600.
	socket string
	// poll is how often kine reads rows written by another server.
	poll time.Duration
	// grpc serves the etcd API (the write limiter is on it).
	grpc *grpc.Server
}

const (
	kineNotifyInterval  = 5 * time.Second
	kineEmulatedVersion = "3.6.11"
	kineStopTimeout     = 2 * time.Second
)

// serveKine starts kine's log-structured backend on k.dsn and serves it over
// etcd's gRPC API on k.socket until ctx ends. It returns the endpoint to
// dial.
func serveKine(ctx context.Context, k kine) (string, error) {
	var wg sync.WaitGroup
	_, backend, err := drivers.New(ctx, &wg, &drivers.Config{
		Endpoint:         k.dsn,
		CompactInterval:  CompactInterval,
		CompactTimeout:   5 * time.Second,
		CompactMinRetain: 1000,
		CompactBatchSize: 1000,
		PollBatchSize:    500,
		PollInterval:     k.poll,
	})
	if err != nil {
		// kine's message may carry the DSN's password: the caller redacts.
		return "", err
	}
	if err := backend.Start(ctx); err != nil {
		return "", fmt.Errorf("starting kine: %w", err)
	}
	server.New(followPolls(ctx, backend), "unix", kineNotifyInterval, kineEmulatedVersion).Register(k.grpc)

	if err := os.Remove(k.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("removing the stale kine socket %s: %w; remove it by hand", k.socket, err)
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "unix", k.socket)
	if err != nil {
		return "", fmt.Errorf("listening on %s: %w", k.socket, err)
	}
	// Whoever can open the socket reads and writes every object.
	if err := os.Chmod(k.socket, 0o600); err != nil {
		listener.Close()
		return "", fmt.Errorf("restricting %s to its owner: %w", k.socket, err)
	}
	go func() {
		if err := k.grpc.Serve(listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.ErrorS(err, "The datastore's etcd API stopped serving")
		}
	}()
	go func() {
		<-ctx.Done()
		// A watch stream never ends by itself: graceful for a moment,
		// then closed.
		t := time.AfterFunc(kineStopTimeout, k.grpc.Stop)
		defer t.Stop()
		k.grpc.GracefulStop()
	}()
	return "unix://" + k.socket, nil
}
