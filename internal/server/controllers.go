package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/apiserver"
	"github.com/muster-io/muster/internal/driver"
	"github.com/muster-io/muster/internal/events"
	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/join"
	"github.com/muster-io/muster/internal/leader"
	"github.com/muster-io/muster/internal/lifecycle"
	"github.com/muster-io/muster/internal/liveness"
	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/notify"
	"github.com/muster-io/muster/internal/planner"
	"github.com/muster-io/muster/internal/planset"
	"github.com/muster-io/muster/internal/pool"
	"github.com/muster-io/muster/internal/registry"
	"github.com/muster-io/muster/internal/serverendpoint"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// controllerLease is the ControllerLease electing the server that runs the
// controllers; one lease for all of them, since they share informers.
const controllerLease = "muster-controllers"

// controllerWorkers is how many objects each controller works on at once.
// A grant is a chain of datastore round trips; on PostgreSQL each takes
// milliseconds, so a few workers would cap a registration storm at a few
// dozen grants a second however idle the CPU.
const controllerWorkers = 16

// controllers is what runs in the server beside the API: on every server
// the caches the authenticator and authorizer read and the ServerEndpoint
// renewal; on the elected leader only, the controllers that write. It is
// built whole before the API server; start runs it once the API serves.
type controllers struct {
	cfg      Config
	join     *join.Join
	objects  *registry.Objects
	self     string
	address  string
	peers    *peerTLS
	tokens   *apiserver.TokenAuthenticator
	liveness *liveness.Tracker
	// returns carry the machines liveness hears of afresh to the lifecycle
	// controller of the current term.
	returns *lifecycle.Returns
	events  *events.Recorder
	// drivers are the machine-pool drivers, shared with the API's
	// admission so that pools are checked against the drivers that run them.
	drivers *driver.Registry
	// client is the loopback client, which works once the API serves.
	client versioned.Interface
	// factory's informers of the registry's kinds read its stores in
	// process (registry.NewInformerFactory); it starts with start.
	factory informers.SharedInformerFactory
	stop    <-chan struct{}
	// kubernetesAssets are the Kubernetes binaries the server serves, and
	// caBundle the CA bundle it serves with (/cacerts): the planner pins
	// the first in plans, which trust the second to download them.
	kubernetesAssets *install.KubernetesAssets
	caBundle         func() []byte

	// stopElection ends this server's part in the leader election;
	// elected is closed once it has ended (and a held lease is released).
	stopElection context.CancelFunc
	elected      chan struct{}
}

// controllerClient is the controllers' client on the privileged loopback
// config.
func controllerClient(loopback *rest.Config) (versioned.Interface, error) {
	rc := rest.CopyConfig(loopback)
	// Controllers answer registration storms; client-side throttling at
	// client-go's defaults would be the bottleneck, not the server.
	rc.QPS, rc.Burst = 1000, 2000
	return versioned.NewForConfig(rc)
}

// start runs once the API serves: it starts the informers, and holds the
// hook (and /readyz) until the join tokens are in the cache.
func (c *controllers) start(ctx context.Context, loopback *rest.Config) error {
	if err := c.events.Start(ctx, loopback); err != nil {
		return fmt.Errorf("recording events: %w", err)
	}
	c.stop = ctx.Done()
	v := c.factory.Muster().V1alpha1()
	machines, registrations := v.Machines(), v.ClusterRegistrations()
	endpoints := v.ServerEndpoints()
	endpoints.Informer()
	c.factory.Start(ctx.Done())
	// The hook returns (and /readyz turns ready) only once every join token
	// is in the cache, so a valid token is never refused during start-up.
	select {
	case <-c.tokens.Loaded():
	case <-ctx.Done():
		return nil // stopped while starting: nothing failed
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), machines.Informer().HasSynced, registrations.Informer().HasSynced) {
			metrics.SetMachines(machines.Lister())
		}
	}()
	c.liveness.Begin()

	// Every server grants the registrations made through it.
	go c.join.Granter().Run(ctx)
	// Every server, not only the leader, merges what the others heard:
	// the leader judges silence by it, and any server's `kubectl get
	// machines` shows it as LAST-SEEN. With n servers that is n-1 reports
	// fetched per server per PeerPollInterval (about 40 bytes a machine
	// heard in the last 10 minutes); a new leader starts with them too.
	go liveness.PollPeers(ctx, c.liveness, endpoints.Lister(), c.self, c.peers.transport(false))
	go serverendpoint.Publish(ctx, c.client.MusterV1alpha1(), c.self, c.address)
	electionCtx, stopElection := context.WithCancel(ctx)
	c.stopElection, c.elected = stopElection, make(chan struct{})
	go func() {
		defer close(c.elected)
		err := leader.Run(electionCtx, leader.Config{
			Client: c.client, Lease: controllerLease, Identity: c.self, Run: c.lead,
			OnNewLeader: func(holder string) {
				klog.InfoS("Controller leader", "leader", holder, "self", holder == c.self)
			},
		})
		if err != nil {
			klog.ErrorS(err, "Leader election stopped")
		}
	}()
	return nil
}

// lead runs the controllers for one term of leadership. They share the
// informers every server keeps for authentication and authorization: a
// second set would decode every change twice, which a registration storm
// pays for. Their queues end with the term.
func (c *controllers) lead(term context.Context) {
	factory := c.factory
	granter := c.join.NewController(factory)
	housekeeper := c.join.NewHousekeeper(c.client, factory)
	machines := lifecycle.NewController(c.client, c.objects, factory, c.liveness, c.returns, c.cfg.AgentSilenceThreshold, c.events)
	pools := pool.NewController(c.client, factory, c.drivers, c.events, "https://"+c.address)
	planSets := planset.NewController(c.client, factory)
	// Off the write path: its handlers only queue, its own goroutines send.
	notifier := notify.NewController(notify.Config{Client: c.client, Factory: factory, Events: c.events, Source: "https://" + c.address,
		InitialBackoff: c.cfg.NotifyInitialBackoff, MaxBackoff: c.cfg.NotifyMaxBackoff, Destinations: c.cfg.NotifyDestinations})
	kubernetes := planner.NewController(c.client, factory, planner.Binaries{Dir: c.cfg.KubernetesBinDir,
		Assets: c.kubernetesAssets, ServerURL: "https://" + c.address, ServerCA: c.caBundle})
	endpoints := factory.Muster().V1alpha1().ServerEndpoints()
	// Start what the controllers added; it runs until the server stops.
	factory.Start(c.stop)
	// Machines whose agents talk to another server were heard there; until
	// those reports arrive (PollPeers, started with the server), count the
	// start of the term as a hearing.
	c.liveness.Begin()
	go serverendpoint.Sweep(term, c.client.MusterV1alpha1(), endpoints.Lister())
	go granter.Run(term, controllerWorkers)
	go housekeeper.Run(term)
	go pools.Run(term)
	go planSets.Run(term)
	go notifier.Run(term)
	go kubernetes.Run(term)
	machines.Run(term, controllerWorkers)
}

// stepDown runs at the start of a clean shutdown, while the API still
// serves: it hands the controller lease over (another server takes over at
// once instead of after the lease duration) and deletes this server's
// endpoint, so agents stop choosing it.
func (c *controllers) stepDown() error {
	if c.stopElection == nil { // stopped before the election began
		return nil
	}
	c.stopElection()
	select {
	case <-c.elected:
	case <-time.After(5 * time.Second):
		klog.InfoS("The controller lease was not released in time; another server takes over when it expires")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	serverendpoint.Withdraw(ctx, c.client.MusterV1alpha1(), c.self)
	return nil
}

// serverName names this server among the servers of a deployment: the host
// name, made a valid object name, and a short hash of the advertised
// address, so that several servers on one host differ and a restarted
// server keeps its name.
func serverName(advertise string, port int) string {
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	var b strings.Builder
	for _, r := range host {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s:%d", advertise, port)))
	suffix := hex.EncodeToString(sum[:4])
	if name == "" || len(validation.IsDNS1123Label(name)) > 0 {
		return "server-" + suffix
	}
	return name + "-" + suffix
}

// slimForCache drops from the controllers' cached objects what no
// controller reads: managed fields, and a registration's CSR and
// certificate (a grant reads its registration afresh). With a fleet of
// thousands, every byte kept per object is kept thousands of times.
func slimForCache(obj interface{}) (interface{}, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if r, ok := obj.(*api.ClusterRegistration); ok {
		r.Spec.CSR, r.Status.Certificate = nil, nil
	}
	return obj, nil
}
