// Package server runs muster-server: it prepares the data dir, opens the
// datastore, serves the API, and shuts them down in the reverse order.
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/datadir"
	"github.com/muster-io/muster/internal/pki"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/apiserver"
	"github.com/muster-io/muster/internal/auditpolicy"
	"github.com/muster-io/muster/internal/console"
	"github.com/muster-io/muster/internal/driver"
	"github.com/muster-io/muster/internal/encryption"
	"github.com/muster-io/muster/internal/events"
	"github.com/muster-io/muster/internal/gctune"
	"github.com/muster-io/muster/internal/history"
	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/join"
	"github.com/muster-io/muster/internal/lifecycle"
	"github.com/muster-io/muster/internal/liveness"
	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/notify"
	"github.com/muster-io/muster/internal/oidcauthn"
	"github.com/muster-io/muster/internal/registry"
	"github.com/muster-io/muster/internal/rejoin"
	"github.com/muster-io/muster/internal/snapshot"
	"github.com/muster-io/muster/internal/snapshot/s3store"
	"github.com/muster-io/muster/internal/store"
	"github.com/muster-io/muster/internal/tunnel"
	"github.com/muster-io/muster/internal/tunnel/serve"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// Config is muster-server's configuration, one field per flag.
type Config struct {
	// DataDir holds the SQLite database, certificates, token and admin kubeconfig.
	DataDir string
	// BindAddress is the address HTTPS listens on.
	BindAddress string
	// AdvertiseAddress is the address agents and other servers use to reach this one.
	AdvertiseAddress string
	// HTTPSPort is the HTTPS port.
	HTTPSPort int
	// TLSSANs are extra names and IPs for the serving certificate.
	TLSSANs []string
	// DatastoreEndpoint selects the datastore: empty for SQLite in DataDir,
	// postgres:// for PostgreSQL, http(s):// for an external etcd.
	DatastoreEndpoint string
	// EncryptionProviderConfig is an EncryptionConfiguration file (mode
	// 0600) whose keys encrypt the resources it names at rest
	// (internal/encryption); empty for none.
	EncryptionProviderConfig string
	// AuthenticationConfig is an AuthenticationConfiguration file
	// (kube-apiserver's --authentication-config) naming the identity
	// providers whose ID tokens sign people in (internal/oidcauthn);
	// empty for none.
	AuthenticationConfig string
	// ConsoleOIDC, if its ClientID is set, offers "Sign in with
	// <provider>" on the console, with a provider of AuthenticationConfig.
	ConsoleOIDC ConsoleOIDC
	// DatastoreTLS is the CA, client certificate and key an external etcd
	// is reached with (--datastore-cafile/certfile/keyfile).
	DatastoreTLS store.TLSFiles
	// AgentCertificateValidity is the lifetime of the certificates granted to agents.
	AgentCertificateValidity time.Duration
	// JoinRate and JoinBurst limit the registrations one join token may make.
	JoinRate  float64
	JoinBurst int
	// AgentSilenceThreshold is how long an agent may go unheard before its
	// Machine is Unavailable.
	AgentSilenceThreshold time.Duration
	// EventTTL is how long an Event is kept after its last write.
	EventTTL time.Duration
	// Token is the server token that servers sharing a datastore have in
	// common; empty to use the data dir's, or to generate one.
	Token string
	// DatastorePollInterval is how often the datastore is polled for other
	// servers' changes; zero for the backend's default.
	DatastorePollInterval time.Duration
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// requests served at once; zero for the defaults.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int

	// Install (k3s-style): AgentBinary is the muster-agent served at
	// /assets/ for install.sh (empty: the one beside this executable);
	// WithAgent also runs the agent of this server's own host.
	AgentBinary string
	WithAgent   bool
	// AgentAssetsDir holds muster-agent-<os>-<arch> files for other
	// architectures, served at /assets/ (empty: beside this executable).
	AgentAssetsDir string
	// HostAgent is what the host's agent (WithAgent) lets operators do on
	// this host; nothing beyond reporting in unless an admin says so.
	HostAgent HostAgentAbilities
	// AgentBinariesDir holds muster-agent-<version>-<os>-<arch> files,
	// served at /assets/agent/<version>/ for plans with spec.agentUpgrade.
	AgentBinariesDir string
	// KubernetesBinDir, when set, is where the planner's plans find etcd,
	// kube-apiserver and kubectl on the machines (else their PATH): a
	// stand-in for binaries fetched pinned by sha256 (docs/clusters.md).
	KubernetesBinDir string
	// KubernetesAssetsDir holds Kubernetes binaries by version and
	// platform (DIR/<version>/<os>-<arch>/<name>), served at
	// /assets/kubernetes/ with their SHA-256; the planner's plans download
	// them pinned by those sums.
	KubernetesAssetsDir string

	// Machine pools: DriversDir holds executable drivers
	// (muster-driver-NAME). EnableProcessDriver offers the built-in
	// "process" driver, which runs machines as this server's user on its
	// host: whoever may write MachinePools gets a shell there. It keeps
	// its machines under ProcessDriverDir (default: ProcessDriverDefaultDir).
	DriversDir          string
	EnableProcessDriver bool
	ProcessDriverDir    string
	// ProcessDriverUser, if set, is the user (name or uid) the process
	// driver's agents run as instead of the server's.
	ProcessDriverUser string

	// Aggregated mode: kubeconfigs of the kube-apiserver that authenticates
	// and authorizes the users its aggregator sends (sample-apiserver's
	// --authentication-kubeconfig and --authorization-kubeconfig).
	AuthenticationKubeconfig, AuthorizationKubeconfig string

	// Datastore operations (transition history, snapshots).

	// History turns the transition history writer on (internal/history).
	History bool
	// HistoryRetention bounds the transition history by age and count.
	HistoryRetention history.Retention
	// SnapshotInterval is how often a snapshot of the datastore is taken
	// into SnapshotDir (default DataDir/snapshots); zero for none.
	SnapshotInterval time.Duration
	SnapshotDir      string
	// SnapshotRetention is how many scheduled snapshots are kept.
	SnapshotRetention int
	// SnapshotS3 is the object storage scheduled snapshots are uploaded
	// to as well, SnapshotRetention of them kept there; none without a bucket.
	SnapshotS3 s3store.Config

	// Audit is the apiserver's audit (--audit-* flags, as kube-apiserver
	// spells them); nil or without a backend records nothing. With a
	// backend and no policy file, internal/auditpolicy's default applies.
	Audit *genericoptions.AuditOptions

	// NotifyInitialBackoff and NotifyMaxBackoff bound the waits between
	// retries of a notification its receiver failed (internal/notify);
	// zero for its defaults.
	NotifyInitialBackoff, NotifyMaxBackoff time.Duration
	// NotifyDestinations is where notification receivers may be: loopback
	// and link-local addresses only where --notification-allowed-networks
	// says.
	NotifyDestinations notify.Destinations
}

// ProcessDriverDefaultDir is where the process driver keeps its machines
// unless --process-driver-dir says otherwise: beside the data dir, never
// in it, so that nothing of the server's is under a machine's dir.
func ProcessDriverDefaultDir(dataDir string) string {
	return filepath.Clean(dataDir) + "-process-machines"
}

// offerProcessDriver registers the process driver when an admin turned it
// on, and otherwise makes a pool naming it say how.
func offerProcessDriver(drivers *driver.Registry, cfg Config) error {
	if !cfg.EnableProcessDriver {
		drivers.Disable("process", "it runs machines as the server's user on the server's host, so whoever may write MachinePools would get a shell there; an admin who accepts that restarts muster-server with --enable-process-driver")
		return nil
	}
	dir := cfg.ProcessDriverDir
	if dir == "" {
		dir = ProcessDriverDefaultDir(cfg.DataDir)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(data, dir); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return fmt.Errorf("--process-driver-dir %s is inside the data dir %s, where the server's CA key and admin kubeconfig are: choose a directory outside it", dir, data)
	}
	p := driver.Process{Dir: dir, AgentBinary: install.AgentBinary(cfg.AgentBinary)}
	if cfg.ProcessDriverUser != "" {
		u, err := user.Lookup(cfg.ProcessDriverUser)
		if err != nil {
			if u, err = user.LookupId(cfg.ProcessDriverUser); err != nil {
				return fmt.Errorf("--process-driver-user %s: no such user on this host: %w", cfg.ProcessDriverUser, err)
			}
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			return fmt.Errorf("--process-driver-user %s (uid %s, gid %s): give an unprivileged user, not root", cfg.ProcessDriverUser, u.Uid, u.Gid)
		}
		p.User = &driver.Credential{UID: uint32(uid), GID: uint32(gid)}
		// The agents' dirs are under dir: the user must reach them.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("making --process-driver-dir %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
	}
	drivers.Add("process", p)
	who := "this server's user"
	if p.User != nil {
		who = "user " + cfg.ProcessDriverUser
	}
	klog.InfoS("The process machine-pool driver is enabled: whoever may write MachinePools may run commands on this host as "+who, "dir", dir)
	return nil
}

// tuneGC lets the garbage collector's target follow the server's load
// (internal/gctune) unless GOGC is set: set it for a fixed trade between
// memory and CPU.
func tuneGC(ctx context.Context) {
	if os.Getenv("GOGC") == "" {
		go gctune.New().Run(ctx)
	}
}

// DefaultDataDir is /var/lib/muster/server for root, ./muster-data otherwise,
// like k3s's split between system and rootless installs.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/muster/server"
	}
	return "muster-data"
}

// Run serves until ctx is cancelled. The API server stops first, so that no
// request is left half-written, and the datastore after it. A stop asked
// for while the server is still starting is a stop, not a failure.
func Run(ctx context.Context, cfg Config) error {
	err := run(ctx, cfg)
	switch {
	case err != nil && ctx.Err() != nil:
		klog.InfoS("muster-server stopped while starting", "detail", err.Error())
		return nil
	case err == nil:
		klog.InfoS("muster-server stopped")
	}
	klog.Flush()
	return err
}

func run(ctx context.Context, cfg Config) error {
	tuneGC(ctx)
	layout, err := datadir.New(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %q: %w", cfg.DataDir, err)
	}
	cfg.DataDir = layout.Dir
	lock, err := datadir.Lock(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	bind := net.ParseIP(cfg.BindAddress)
	if bind == nil {
		return fmt.Errorf("--bind-address %q is not an IP address: give one such as 0.0.0.0 or 127.0.0.1", cfg.BindAddress)
	}
	// Before anything is generated or the datastore dialled: a port in use
	// would otherwise be found only after a CA, certificates and a token
	// were made for a server that cannot serve.
	if err := checkPort(bind, cfg.HTTPSPort); err != nil {
		return err
	}
	offsite, err := offsiteStore(cfg)
	if err != nil {
		return err
	}
	ds, err := store.Open(ctx, store.Config{DataDir: cfg.DataDir, Endpoint: cfg.DatastoreEndpoint, PollInterval: cfg.DatastorePollInterval, TLS: cfg.DatastoreTLS})
	if err != nil {
		return err
	}
	defer func() {
		if err := ds.Close(); err != nil {
			klog.ErrorS(err, "Closing the datastore")
		}
	}()
	if ds.Backend() == "etcd" {
		// Said once, at startup, so an operator who chose etcd learns what
		// it costs before looking for a history that is not kept.
		klog.InfoS("The datastore is an external etcd: "+store.EtcdUnsupported, "etcdVersion", ds.EtcdVersion())
		if note := store.EtcdVersionNote(ds.EtcdVersion()); note != "" {
			klog.Warning(note)
		}
	}
	encrypt, err := checkEncryption(ctx, cfg, ds)
	if err != nil {
		return err
	}
	state, err := prepareCertificates(ctx, cfg, ds)
	if err != nil {
		return err
	}
	stopHistory, err := startHistory(ctx, cfg, ds, encrypt)
	if err != nil {
		return err
	}
	defer stopHistory()
	self := serverName(state.AdvertiseAddress, cfg.HTTPSPort)
	advertised := net.JoinHostPort(state.AdvertiseAddress, fmt.Sprint(cfg.HTTPSPort))
	peers, err := newPeerTLS(state.CA, state.BundlePEM, self)
	if err != nil {
		return err
	}

	var idTokens authenticator.Token
	var consoleOIDC *console.OIDC
	if cfg.AuthenticationConfig != "" {
		a, err := oidcauthn.Load(ctx, cfg.AuthenticationConfig)
		if err != nil {
			return err
		}
		idTokens = a
		if consoleOIDC, err = cfg.ConsoleOIDC.build(a); err != nil {
			return err
		}
	} else if cfg.ConsoleOIDC.ClientID != "" {
		return fmt.Errorf("--console-oidc-client-id needs --%s: the file names the identity provider and how its tokens map to users and groups", oidcauthn.Flag)
	}

	consoleClient, err := ds.Client()
	if err != nil {
		return fmt.Errorf("connecting the console's token store to the datastore: %w", err)
	}
	defer consoleClient.Close()
	webConsole := console.OnDatastore(consoleClient)
	webConsole.OIDC = consoleOIDC
	kubernetesAssets := install.NewKubernetesAssets(cfg.KubernetesAssetsDir)
	public := install.New(install.Config{AgentBinary: cfg.AgentBinary, AgentAssetsDir: cfg.AgentAssetsDir, AgentBinariesDir: cfg.AgentBinariesDir,
		Kubernetes: kubernetesAssets, Caller: apiserver.CallerName}).Paths()
	public[console.Prefix] = webConsole

	recorder := events.NewRecorder(self)
	stopSnapshots, err := startSnapshots(ctx, cfg, ds, newOffsite(cfg, offsite, recorder, self))
	if err != nil {
		return err
	}
	defer stopSnapshots()
	// Each server reports the tunnels it holds with its liveness report,
	// and forwards a request for a machine whose tunnel another holds.
	hub := tunnel.NewHub()
	// A machine heard afresh is looked at by the lifecycle controller at
	// once: returns is made first, for the tracker to notify and each
	// term's controller to receive.
	returns := lifecycle.NewReturns()
	tracker := liveness.New(liveness.Options{OnReturn: returns.Notify, ReportTunnels: hub.Opened})
	metrics.Register()
	notify.RegisterMetrics()
	metrics.SetConnectedAgents(func() int { return tracker.Connected(metrics.ConnectedWindow) })
	metrics.SetTunnels(hub.Len)
	tunnels := &serve.Server{Hub: hub, Events: recorder, LastSeen: tracker.LastSeen, Forwarding: &serve.Forwarding{
		Self: self, Locate: tracker.TunnelHolder, Transport: peers.transport(true),
	}}
	drivers := driver.NewRegistry(cfg.DriversDir, map[string]driver.Driver{
		"ssh": &driver.SSH{KeyDir: layout.SSHDriverKeys, Script: install.Script},
	})
	if err := offerProcessDriver(drivers, cfg); err != nil {
		return err
	}
	// The wiring runs one way: the registry's stores first, then what is
	// built on them (the informers served from them in process, the join,
	// the token authenticator and the agent authorizer), each whole, and
	// the API server last, from them.
	if err := auditpolicy.Resolve(cfg.Audit, layout.AuditPolicy); err != nil {
		return err
	}
	// What /cacerts serves, swapped when a CA rotation reaches this server.
	var caBundle atomic.Pointer[[]byte]
	caBundle.Store(&state.BundlePEM)
	completed, err := apiserver.Config{
		Audit:           cfg.Audit,
		BindAddress:     bind,
		Port:            cfg.HTTPSPort,
		ServingCertFile: state.Files.ServingCert,
		ServingKeyFile:  state.Files.ServingKey,
		// Client certificates of both CAs pass during a rotation.
		ClientCAFile:                state.Files.CABundle,
		CABundle:                    func() []byte { return *caBundle.Load() },
		Storage:                     ds.Transport(),
		CompactionInterval:          ds.CompactionInterval(),
		Encryption:                  encrypt.ResourceTransformers(),
		ObserveCaller:               tracker.Observe,
		MaxRequestsInFlight:         cfg.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: cfg.MaxMutatingRequestsInFlight,
		PeerHandlers:                map[string]http.Handler{liveness.ReportPath: tracker},
		Delegation:                  &apiserver.Delegation{AuthenticationKubeconfig: cfg.AuthenticationKubeconfig, AuthorizationKubeconfig: cfg.AuthorizationKubeconfig},
		PublicHandlers:              public,
		SelfPaced:                   install.IsDownload,
		PublicWritePaths:            []string{console.SessionPath},
		PrivatePaths:                console.PrivatePaths,
		Sessions:                    webConsole.Sessions,
		IDTokens:                    idTokens,
		EventTTL:                    cfg.EventTTL,
		LastHeard:                   tracker.LastSeen,
		Drivers:                     drivers,
		Tunnels:                     tunnels,
		History:                     historyReader(ds),
	}.Complete()
	if err != nil {
		return err
	}
	objects := completed.Objects()
	client, err := controllerClient(completed.LoopbackConfig())
	if err != nil {
		return err
	}
	// Started once the API serves (the controllers' post-start hook).
	factory := registry.NewInformerFactory(objects, client, informers.WithTransform(slimForCache))
	v := factory.Muster().V1alpha1()
	tokenCache, machines, registrations := v.ClusterRegistrationTokens(), v.Machines().Informer(), v.ClusterRegistrations().Informer()
	rejoinClient, err := ds.Client()
	if err != nil {
		return fmt.Errorf("connecting the rejoin's record to the datastore: %w", err)
	}
	defer rejoinClient.Close()
	// The CA that signs agents' certificates: a rotation replaces it.
	signing := pki.NewCurrent(state.CA)
	joins, err := join.New(join.Config{
		CA: signing, Validity: cfg.AgentCertificateValidity, TokenJoinRate: cfg.JoinRate, TokenJoinBurst: cfg.JoinBurst,
		Objects: objects, Machines: machines, Events: recorder, Rejoins: &rejoin.Store{Client: rejoinClient},
	})
	if err != nil {
		return err
	}
	// A CA rotation in the datastore reaches this server while it runs:
	// the CA that signs agents' certificates first, then the peer TLS,
	// then /cacerts (which sends agents to renew under the new CA). The
	// client CA and serving certificate files that Ensure rewrites are
	// reloaded by the API server itself.
	caClient, err := ds.Client()
	if err != nil {
		return fmt.Errorf("connecting the CA rotation's watch to the datastore: %w", err)
	}
	defer caClient.Close()
	reloader := &caReloader{client: caClient, token: state.Token, dataDir: cfg.DataDir,
		ensure: func() (*bootstrap.State, error) { return ensureDataDir(cfg, state.Token) },
		apply: func(s *bootstrap.State) error {
			signing.Rotate(s.CA)
			if err := peers.update(s.CA, s.BundlePEM); err != nil {
				return err
			}
			caBundle.Store(&s.BundlePEM)
			return nil
		}}
	reloader.current.Store(state)
	go reloader.run(ctx)
	// Until the token cache has synced no join token is judged; the
	// controllers' hook holds /readyz until then.
	tokens := apiserver.NewTokenAuthenticator(tokenCache.Lister(), tokenCache.Informer().HasSyncedChecker())
	// Machines' requests wait in the request gate until the authorizer's
	// caches fill (a restarted server would otherwise send a fleet's reads
	// to the datastore); what they miss is read from the stores.
	registrationRules, err := apiserver.NewAgentAuthorizer(apiserver.AgentAuthorizerConfig{Live: objects, Machines: machines, Registrations: registrations})
	if err != nil {
		return err
	}
	// Roles scoped to clusters: the bindings, and the objects whose
	// cluster they are judged by, from the informers every server keeps.
	clusterInf, bindingInf := v.Clusters().Informer(), v.AccessBindings().Informer()
	planSets, pools := v.MachinePlanSets(), v.MachinePools()
	synced := []cache.InformerSynced{clusterInf.HasSynced, bindingInf.HasSynced, machines.HasSynced, registrations.HasSynced,
		tokenCache.Informer().HasSynced, planSets.Informer().HasSynced, pools.Informer().HasSynced}
	scopes, err := apiserver.NewScopes(apiserver.ScopeConfig{
		Bindings: bindingInf, Clusters: v.Clusters().Lister(), Machines: v.Machines().Lister(),
		PlanSets: planSets.Lister(), Pools: pools.Lister(), Tokens: tokenCache.Lister(), Registrations: v.ClusterRegistrations().Lister(),
		ClusterEvents: clusterInf,
		Synced: func() bool {
			for _, s := range synced {
				if !s() {
					return false
				}
			}
			return true
		},
	})
	if err != nil {
		return err
	}
	webConsole.Scope = scopes.Visible
	api, err := completed.New(apiserver.Parts{Tokens: tokens, Agents: registrationRules, Registrations: joins.Storage, Scopes: scopes})
	if err != nil {
		return err
	}
	ctl := &controllers{
		cfg: cfg, join: joins, objects: objects, self: self, address: advertised, peers: peers,
		tokens: tokens, liveness: tracker, returns: returns, events: recorder, drivers: drivers,
		client: client, factory: factory,
		kubernetesAssets: kubernetesAssets, caBundle: func() []byte { return *caBundle.Load() },
	}
	if err := api.AddPostStartHook("muster-controllers", func(ctx context.Context) error {
		return ctl.start(ctx, api.LoopbackConfig())
	}); err != nil {
		return err
	}
	if err := api.AddPreShutdownHook("muster-close-tunnels", func() error { hub.Close(); return nil }); err != nil {
		return err
	}
	if err := api.AddPreShutdownHook("muster-step-down", ctl.stepDown); err != nil {
		return err
	}
	if cfg.WithAgent {
		serverURL := "https://" + advertised
		if err := api.AddPostStartHook("muster-host-agent", func(ctx context.Context) error {
			go runHostAgent(ctx, cfg, layout.HostAgent, api.LoopbackConfig(), serverURL)
			return nil
		}); err != nil {
			return err
		}
	}
	klog.InfoS("muster-server starting", "server", self, "advertise", advertised, "dataDir", cfg.DataDir, "datastore", ds.Backend(),
		"https", net.JoinHostPort(cfg.BindAddress, fmt.Sprint(cfg.HTTPSPort)), "adminKubeconfig", state.Files.AdminKubeconfig)
	return api.Run(ctx)
}

// checkEncryption loads --encryption-provider-config, if given, and
// refuses to start on a datastore holding an object its keys (or, without
// the flag, plaintext reads) cannot decrypt: a server that started would
// fail every read of it. Objects under an older key are only counted: the
// operator rewrites them (docs/encryption.md).
func checkEncryption(ctx context.Context, cfg Config, ds *store.Datastore) (*encryption.Config, error) {
	var c *encryption.Config
	if cfg.EncryptionProviderConfig != "" {
		var err error
		if c, err = encryption.Load(ctx, cfg.EncryptionProviderConfig); err != nil {
			return nil, err
		}
	}
	client, err := ds.Client()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	report, err := encryption.Check(ctx, client, c)
	if err != nil {
		return nil, err
	}
	if c != nil {
		klog.InfoS("Encrypting at rest the resources --"+encryption.Flag+" names", "file", c.Path, "objectsChecked", report.Objects)
	}
	if report.Stale > 0 {
		klog.InfoS("Some objects are stored otherwise than the first provider of --"+encryption.Flag+" writes (an older key, or plaintext): rewrite them to finish a key rotation ("+encryption.Doc+")",
			"objects", report.Stale, "byResource", report.StaleSummary())
	}
	return c, nil
}

// startHistory runs the transition history writer beside the API (reading
// what encrypt encrypts at rest decrypted); its stop
// waits for it, so that the datastore closes after it.
func startHistory(ctx context.Context, cfg Config, ds *store.Datastore, encrypt *encryption.Config) (func(), error) {
	switch {
	case !cfg.History:
		klog.InfoS("The transition history is off (--transition-history=false): muster-server history shows nothing new")
		return func() {}, nil
	case ds.SQL() == nil:
		klog.InfoS("The transition history is off: it is kept in SQL beside kine's table and an external etcd has none (muster-server history says so); each object's status.transitions still holds its last " + fmt.Sprint(api.MaxTransitions) + " transitions")
		return func() {}, nil
	}
	client, err := ds.Client()
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w := &history.Writer{DB: ds.SQL(), Dialect: ds.Backend(), Client: client, Retention: cfg.HistoryRetention}
	if encrypt != nil {
		// Clusters may be encrypted at rest (their API credential): the
		// writer reads them decrypted.
		w.Read = encrypt.Read
	}
	go func() { defer close(done); w.Run(hctx) }()
	return func() { cancel(); <-done; client.Close() }, nil
}

// historyReader serves the history subresources from the SQL history
// table; nil on etcd, which has none.
func historyReader(ds *store.Datastore) registry.HistoryReader {
	db := ds.SQL()
	if db == nil {
		return nil
	}
	dialect := ds.Backend()
	return func(ctx context.Context, kind, name string, limit int) ([]history.Record, error) {
		return history.Read(ctx, db, dialect, history.Query{Kind: kind, Name: name, Limit: limit})
	}
}

// startSnapshots takes scheduled snapshots of the datastore, and hands
// each to up (object storage) when not nil.
func startSnapshots(ctx context.Context, cfg Config, ds *store.Datastore, up snapshot.Uploader) (func(), error) {
	if cfg.SnapshotInterval <= 0 {
		return func() {}, nil
	}
	dir := cfg.SnapshotDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "snapshots")
	}
	client, err := ds.Client()
	if err != nil {
		return nil, err
	}
	ca, err := snapshot.DeploymentOf(cfg.DataDir)
	if err != nil {
		client.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		snapshot.Schedule(sctx, client, ds.Backend(), dir, cfg.SnapshotInterval, cfg.SnapshotRetention, up,
			snapshot.HistoryFrom(ds.SQL(), ds.Backend()), snapshot.Of(ca))
	}()
	return func() { cancel(); <-done; client.Close() }, nil
}

func checkPort(bind net.IP, port int) error {
	addr := net.JoinHostPort(bind.String(), fmt.Sprint(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w; stop what uses the port, or choose another with --https-port (or --bind-address)", addr, err)
	}
	return l.Close()
}
