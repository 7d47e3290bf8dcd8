// Package apiserver wires the muster.io API group into a k8s.io/apiserver
// GenericAPIServer that runs on its own: no kube-apiserver behind it, so it
// brings its own authentication (client certificates and join tokens), its
// own authorizer, and no priority-and-fairness or admission chain.
package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	storagevalue "k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientrest "k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/driver"
	"github.com/muster-io/muster/internal/events"
	"github.com/muster-io/muster/internal/generated/openapi"
	"github.com/muster-io/muster/internal/k8sproxy"
	"github.com/muster-io/muster/internal/registry"
	"github.com/muster-io/muster/internal/tunnel/serve"
	"github.com/muster-io/muster/internal/watchcache"
	"github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// etcdPrefix is where every muster.io object lives in the key space.
const etcdPrefix = "/registry/muster.io"

// Defaults of Config's in-flight limits.
const (
	DefaultMaxRequestsInFlight         = 2000
	DefaultMaxMutatingRequestsInFlight = 1000
)

// Config is what the API server needs from the rest of muster-server
// beside its Parts, which are built on the stores Complete makes.
type Config struct {
	// BindAddress and Port are where HTTPS is served.
	BindAddress net.IP
	Port        int
	// ServingCertFile and ServingKeyFile are the server's TLS identity.
	ServingCertFile, ServingKeyFile string
	// ClientCAFile holds the CA that signs admin and agent client certificates.
	ClientCAFile string
	// CABundle gives what /cacerts serves: the exact bytes whose SHA-256
	// join tokens pin. It is asked on every request, so that a CA rotation
	// reaching the running server is served at once.
	CABundle func() []byte
	// Storage is how the etcd3 storage reaches the datastore (kine or etcd).
	Storage storagebackend.TransportConfig
	// CompactionInterval is the apiserver's own compaction; zero when kine compacts.
	CompactionInterval time.Duration
	// Encryption, if set, encrypts the resources it names at rest
	// (--encryption-provider-config, internal/encryption); the storage
	// calls its transformers on every read and write.
	Encryption storagevalue.ResourceTransformers
	// ObserveCaller, if set, is told the identity of every authenticated
	// request (machine liveness); it must be cheap.
	ObserveCaller func(user.Info)
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// requests served at once (watches excluded); past them a request is
	// refused with 429 and the client retries a second later. Zero means
	// the defaults below.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// PeerHandlers are non-resource paths served to the other servers of
	// the deployment (group muster:servers) and to administrators only.
	PeerHandlers map[string]http.Handler
	// Delegation, if set, runs Muster behind a kube-apiserver (aggregated mode).
	Delegation *Delegation
	// PublicHandlers are non-resource paths served to anyone, like
	// /cacerts (the install script and its binaries); a path ending in "/"
	// is a prefix.
	PublicHandlers map[string]http.Handler
	// PrivatePaths are exact paths under a PublicHandlers prefix that are
	// not public: only callers whose role allows them reach their handler
	// (the console's token minting: administrators).
	PrivatePaths []string
	// SelfPaced, if set, says which public requests bound their own
	// duration and number (the binary downloads, internal/install): the
	// chain's request timeout and in-flight limits leave them alone.
	SelfPaced func(*http.Request) bool
	// PublicWritePaths are public paths anyone may also POST and DELETE
	// to (the console's sign-in: the handler checks the credential).
	PublicWritePaths []string
	// IDTokens, if set, authenticates bearer tokens that are an
	// identity provider's ID tokens (--authentication-config,
	// internal/oidcauthn).
	IDTokens authenticator.Token
	// Sessions, if set, authenticates browser sessions (the web console's
	// cookie, only on requests that carry its CSRF header).
	Sessions authenticator.Request
	// EventTTL is how long an Event is kept after its last write; zero
	// means events.DefaultTTL.
	EventTTL time.Duration
	// LastHeard, if set, is when a machine's agent was last heard by any
	// server (in memory); `kubectl get machines` shows it as LAST-SEEN.
	LastHeard func(machine string) time.Time
	// Tunnels, if set, holds the agents' tunnels (POST tunnel.Path) and
	// serves the Machine subresources that reach through them
	// (machines/exec, machines/portforward, machines/log).
	Tunnels *serve.Server
	// History reads the transition history (machines/history,
	// clusters/history); nil on a datastore without one, where those
	// subresources answer 501 saying so.
	History registry.HistoryReader
	// Drivers, if set, are the machine-pool drivers: pools are checked
	// against their driver's schema at admission, and DriversPath
	// publishes the schemas.
	Drivers *driver.Registry
	// Audit, if set, is the apiserver's own audit: its policy and its log
	// and webhook backends, applied as kube-apiserver applies them. Its
	// filter sees every request of the chain; heartbeats and agents'
	// tunnels are answered ahead of it.
	Audit *genericoptions.AuditOptions
}

// Parts are what the API server is assembled from that are built on its
// own stores: made after Complete, from CompletedConfig.Objects and the
// informers served from them, and whole before New.
type Parts struct {
	// Tokens authenticates bearer tokens (join tokens).
	Tokens *TokenAuthenticator
	// Agents authorizes join tokens and machine certificates, after the
	// built-in rules (admins, public paths), and ends the requests of
	// voided machine certificates.
	Agents *AgentAuthorizer
	// Registrations builds the clusterregistrations resource on the
	// registry's store of that kind (the join, internal/join); nil serves
	// the plain store.
	Registrations func(main *registry.REST) rest.Storage
	// Scopes, if set, authorizes users by their AccessBindings: roles
	// scoped to clusters (scope.go).
	Scopes *Scopes
}

// CompletedConfig is the API server's configuration with its serving and
// storage set up: the registry's stores exist, so what reads them in
// process (informers, the join, the authenticator and authorizer) can be
// built before the server is assembled from them (New).
type CompletedConfig struct {
	cfg Config
	rc  *genericapiserver.RecommendedConfig
	// snapshots trims the watch cache's list snapshots; optsGetter is the
	// stores' storage, through it.
	snapshots  *watchcache.Trimmer
	optsGetter generic.RESTOptionsGetter
	storages   []*registry.Storage
	objects    *registry.Objects
}

// Server is a prepared API server.
type Server struct {
	generic *genericapiserver.GenericAPIServer
}

// featureGates are the apiserver features muster sets otherwise than
// kube-apiserver does, for a fleet of agents that each hold a watch.
var featureGates = map[string]bool{
	// The apiserver prepares a watch on a goroutine of its own and serves
	// it from a shallow one, so the deep stack of the handler chain is
	// freed instead of being kept by every agent's watch: 316 -> 214 MiB of
	// stacks for 5,000 agents. Alpha since 1.30, off by default.
	string(features.APIServingWithRoutine): true,
	// A copy-on-write snapshot of the watch cache per revision, so that a
	// paginated list's continue pages are served from memory, not the
	// datastore (2x faster walks). Left alone, the snapshots of a storm
	// stay until the next one (~50 MiB after 5,000 joins); internal/watchcache
	// drops those older than a minute.
	string(features.ListFromCacheSnapshot): true,
}

// Complete sets up serving (the port is bound, and the loopback client
// config made) and storage, and builds the registry's stores on the
// datastore. Nothing is served until New's server runs.
func (cfg Config) Complete() (*CompletedConfig, error) {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(featureGates); err != nil {
		return nil, fmt.Errorf("setting the apiserver's feature gates: %w", err)
	}
	rc := genericapiserver.NewRecommendedConfig(Codecs)
	rc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	// Priority and fairness needs kube-apiserver's flowcontrol API; the
	// max-in-flight limits stand in for it.
	rc.FlowControl = nil
	// kube-apiserver's 400/200 suit a cluster's components; a fleet
	// joining at once is thousands of agents, each with one request in
	// flight, and a 429 costs each of them a second. Writes queue for the
	// datastore in order (internal/store) instead, which is fairer and
	// cheaper than refusing them.
	rc.MaxRequestsInFlight, rc.MaxMutatingRequestsInFlight = DefaultMaxRequestsInFlight, DefaultMaxMutatingRequestsInFlight
	if cfg.MaxRequestsInFlight > 0 {
		rc.MaxRequestsInFlight = cfg.MaxRequestsInFlight
	}
	if cfg.MaxMutatingRequestsInFlight > 0 {
		rc.MaxMutatingRequestsInFlight = cfg.MaxMutatingRequestsInFlight
	}
	// Agents hold watches open for many minutes; on SIGTERM they are ended
	// (clients re-watch elsewhere) instead of holding the shutdown for the
	// full request timeout.
	rc.ShutdownWatchTerminationGracePeriod = 2 * time.Second

	serving := genericoptions.NewSecureServingOptions()
	serving.BindAddress = cfg.BindAddress
	serving.BindPort = cfg.Port
	serving.ServerCert.CertKey.CertFile = cfg.ServingCertFile
	serving.ServerCert.CertKey.KeyFile = cfg.ServingKeyFile
	if err := serving.WithLoopback().ApplyTo(&rc.SecureServing, &rc.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("serving HTTPS on %s:%d: %w (is another process using the port? choose one with --https-port)", cfg.BindAddress, cfg.Port, err)
	}
	// The loopback client talks to this very process: at a specific bind
	// address that is no loopback, client-go would send it through the
	// HTTPS_PROXY the server's environment names (for its S3 calls), and
	// the server's own controllers would fail whenever that proxy does.
	rc.LoopbackClientConfig.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	// A client that stops reading cannot hold a connection, and the
	// requests on it, for ever (WriteProgressTimeout says why).
	rc.SecureServing.Listener = withWriteProgress(rc.SecureServing.Listener, WriteProgressTimeout)

	// Oversized requests and objects get 413 naming the limit, not the
	// datastore's 503 (registry.MaxObjectBytes says why these sizes).
	rc.MaxRequestBodyBytes = registry.MaxRequestBodyBytes
	etcd := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(etcdPrefix,
		registry.LimitObjectSize(Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))))
	etcd.StorageConfig.Transport = cfg.Storage
	etcd.StorageConfig.CompactionInterval = cfg.CompactionInterval
	// The muster.io types have no protobuf encoding.
	etcd.DefaultStorageMediaType = "application/json"
	if cfg.Encryption != nil {
		// Set before ApplyTo, which then wraps every resource's storage
		// config with its transformer (and loads no file of its own).
		rc.Config.ResourceTransformers = cfg.Encryption
	}
	if err := etcd.ApplyTo(&rc.Config); err != nil {
		return nil, fmt.Errorf("configuring storage: %w", err)
	}
	if err := cfg.Audit.ApplyTo(&rc.Config); err != nil {
		return nil, fmt.Errorf("configuring audit: %w (check --audit-policy-file, --audit-log-path and --audit-webhook-config-file)", err)
	}

	snapshots := watchcache.NewTrimmer(watchcache.Keep)
	optsGetter := snapshots.RESTOptionsGetter(rc.RESTOptionsGetter)
	storages, objects, err := registry.All(Scheme, optsGetter, cfg.LastHeard, driverSchemas(cfg.Drivers))
	if err != nil {
		return nil, err
	}
	return &CompletedConfig{cfg: cfg, rc: rc, snapshots: snapshots, optsGetter: optsGetter, storages: storages, objects: objects}, nil
}

// Objects is the server's own, in-process access to its objects.
func (c *CompletedConfig) Objects() *registry.Objects { return c.objects }

// LoopbackConfig is a privileged client config for controllers in this
// process; it works once the server New builds runs.
func (c *CompletedConfig) LoopbackConfig() *clientrest.Config { return c.rc.LoopbackClientConfig }

// New assembles the API server from its parts, on the stores Complete
// built; nothing listens until Run. It is called once.
func (c *CompletedConfig) New(parts Parts) (*Server, error) {
	if parts.Tokens == nil || parts.Agents == nil {
		return nil, fmt.Errorf("the API server needs a token authenticator and an agent authorizer")
	}
	cfg, rc := c.cfg, c.rc
	// An exec, a port-forward or a log lasts as long as the user keeps it:
	// none may be cut by the request timeout or count against the
	// in-flight limits. Its tunnel's streams are bounded instead by
	// tunnel.DefaultMaxStreams. (The tunnels themselves are served ahead
	// of the chain: withTunnels.)
	// So does a request to a cluster's API through the server
	// (clusters/proxy, internal/k8sproxy), as kube-apiserver treats
	// pods/proxy: its watches and execs last as long as the user keeps
	// them, and the cluster's own kube-apiserver bounds the rest.
	longRunning := genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("exec", "portforward", "log", v1alpha1.ClusterProxySubresource))
	rc.LongRunningFunc = longRunning
	if cfg.SelfPaced != nil {
		// A download of a binary on a slow link may outlast the request
		// timeout; its handler bounds its duration and its number instead.
		rc.LongRunningFunc = func(r *http.Request, ri *request.RequestInfo) bool {
			return longRunning(r, ri) || cfg.SelfPaced(r)
		}
	}
	// /k8s/clusters/NAME/... is a verb on clusters/proxy, so that the
	// chain's authorizer judges it with the roles (internal/k8sproxy).
	rc.RequestInfoResolver = k8sproxy.RequestInfoResolver(genericapiserver.NewRequestInfoResolver(&rc.Config))
	observe := cfg.ObserveCaller
	gate := &credentialGate{tokens: parts.Tokens, agents: parts.Agents, idTokens: cfg.IDTokens != nil, failures: newFailureLimiter(AuthFailureLimit, AuthFailureWindow), hold: credentialHold,
		recheck: unknownTokenRecheck, rechecking: make(chan struct{}, maxRechecking)}
	rc.BuildHandlerChainFunc = func(h http.Handler, gc *genericapiserver.Config) http.Handler {
		refuse := func(w http.ResponseWriter, r *http.Request, err error) {
			responsewriters.ErrorNegotiated(err, gc.Serializer, schema.GroupVersion{}, w, r)
		}
		gate.refuse = refuse
		h = withAgentRequests(h, parts.Agents, refuse)
		if parts.Scopes != nil {
			// Inside the default chain: after authentication and authorization.
			// Open requests are judged again by the whole chain's authorizer
			// when bindings change.
			h = withScopeRevocation(h, parts.Scopes, gc.Authorization.Authorizer)
		}
		if observe != nil {
			// Wrapped inside the default chain, so it runs after authentication.
			inner := h
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if u, ok := request.UserFrom(r.Context()); ok {
					observe(u)
				}
				inner.ServeHTTP(w, r)
			})
		}
		front := newAheadOfChain(gc)
		h = withHeartbeats(genericapiserver.DefaultBuildHandlerChain(h, gc), front, observe)
		if cfg.Tunnels != nil {
			h = withTunnels(h, cfg.Tunnels, front, parts.Agents, observe)
		}
		return gate.wrap(h)
	}

	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("loading client CA %s: %w", cfg.ClientCAFile, err)
	}
	if err := rc.Authentication.ApplyClientCert(clientCA, rc.SecureServing); err != nil {
		return nil, fmt.Errorf("configuring client certificates: %w", err)
	}
	publicPaths := make([]string, 0, len(cfg.PublicHandlers))
	for path := range cfg.PublicHandlers {
		publicPaths = append(publicPaths, path)
	}
	var tokens []authenticator.Token
	if parts.Tokens != nil {
		tokens = append(tokens, parts.Tokens)
	}
	if cfg.IDTokens != nil {
		tokens = append(tokens, cfg.IDTokens)
	}
	rc.Authentication.Authenticator = newAuthenticator(clientCA, tokens, cfg.Sessions, publicPaths, cfg.PrivatePaths)
	peerPaths := make([]string, 0, len(cfg.PeerHandlers))
	for path := range cfg.PeerHandlers {
		peerPaths = append(peerPaths, path)
	}
	rules := []authorizer.AuthorizerFunc{parts.Agents.Authorize}
	if cfg.Delegation.enabled() {
		authn, authz, err := cfg.Delegation.apply(rc, rc.Authentication.Authenticator)
		if err != nil {
			return nil, err
		}
		rc.Authentication.Authenticator = authn
		rules = append(rules, delegate(authz))
	}
	authz := authorizer.AuthorizerFunc(Authorizer{Rules: rules, PeerPaths: peerPaths, PublicPaths: publicPaths, PrivatePaths: cfg.PrivatePaths, PublicWritePaths: cfg.PublicWritePaths, Scopes: parts.Scopes}.Authorize)
	rc.Authorization.Authorizer = authz
	if parts.Scopes != nil {
		// Writes are judged by the object written.
		rc.AdmissionControl = ScopeAdmission{Scopes: parts.Scopes}
	}
	// The loopback client (controllers inside this process) authenticates as a
	// privileged user with a random token that never leaves the process.
	genericapiserver.AuthorizeClientBearerToken(rc.LoopbackClientConfig, &rc.Authentication, &rc.Authorization)
	gate.loopback = rc.LoopbackClientConfig.BearerToken

	namer := openapinamer.NewDefinitionNamer(externalScheme)
	rc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	rc.OpenAPIConfig.Info.Title = "Muster"
	rc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	rc.OpenAPIV3Config.Info.Title = "Muster"

	generic, err := rc.Complete().New("muster-server", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the API server: %w", err)
	}

	// A plan's secrets leave the API only for callers the authorizer
	// allows machineplans/secrets (roles.go, agentauthz.go, or the
	// kube-apiserver's RBAC): everyone else reads them redacted.
	storages := c.storages
	if err := registry.GuardSecrets(storages, rc.Authorization.Authorizer); err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	resources := map[string]rest.Storage{}
	for _, s := range storages {
		resources[s.Resource] = s.Main
		resources[s.Resource+"/status"] = s.Status
	}
	if cfg.Tunnels != nil {
		for path, s := range registry.MachineConnectStorages(resources[registry.Machine.Resource].(rest.Getter), cfg.Tunnels) {
			resources[path] = s
		}
	}
	getters := map[string]rest.Getter{}
	for _, r := range []string{registry.Machine.Resource, registry.Cluster.Resource} {
		getters[r] = resources[r].(rest.Getter)
	}
	for path, s := range registry.HistoryStorages(getters, cfg.History) {
		resources[path] = s
	}
	if parts.Registrations != nil {
		main := resources[registry.ClusterRegistration.Resource].(*registry.REST)
		resources[registry.ClusterRegistration.Resource] = parts.Registrations(main)
	}
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = resources
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing the muster.io API: %w", err)
	}
	if err := installEvents(generic, c.optsGetter, cfg.EventTTL); err != nil {
		return nil, err
	}

	caBundle := cfg.CABundle
	generic.Handler.NonGoRestfulMux.HandleFunc("/cacerts", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(caBundle())
	})
	if cfg.Tunnels != nil {
		// A cluster's own API, through a control-plane machine's tunnel;
		// the chain has authorized the user on clusters/proxy already.
		generic.Handler.NonGoRestfulMux.HandlePrefix(k8sproxy.Prefix, &k8sproxy.Proxy{
			Source: c.objects, Hub: cfg.Tunnels.Hub, Forwarding: cfg.Tunnels.Forwarding,
			Refuse: func(w http.ResponseWriter, r *http.Request, err error) {
				responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, r)
			},
		})
	}
	if cfg.Drivers != nil {
		h := driversHandler{drivers: cfg.Drivers}
		generic.Handler.NonGoRestfulMux.Handle(DriversPath, h)
		generic.Handler.NonGoRestfulMux.HandlePrefix(DriversPath+"/", h)
	}
	for path, h := range cfg.PeerHandlers {
		generic.Handler.NonGoRestfulMux.Handle(path, h)
	}
	for path, h := range cfg.PublicHandlers {
		if strings.HasSuffix(path, "/") {
			generic.Handler.NonGoRestfulMux.HandlePrefix(path, h)
		} else {
			generic.Handler.NonGoRestfulMux.Handle(path, h)
		}
	}
	if err := generic.AddPostStartHook("muster-trim-list-snapshots", func(hc genericapiserver.PostStartHookContext) error {
		go c.snapshots.Run(hc.Context)
		return nil
	}); err != nil {
		return nil, err
	}
	return &Server{generic: generic}, nil
}

// driverSchemas keeps a nil registry a nil interface, so that registry.All
// installs no driver check rather than one that panics.
func driverSchemas(r *driver.Registry) validation.DriverSchemas {
	if r == nil {
		return nil
	}
	return r
}

// installEvents serves the legacy core group with only core/v1 Events,
// where kubectl looks for them, on the same datastore.
func installEvents(s *genericapiserver.GenericAPIServer, optsGetter generic.RESTOptionsGetter, ttl time.Duration) error {
	codec := registry.LimitObjectSize(Codecs.LegacyCodec(corev1.SchemeGroupVersion))
	store, err := events.NewStorage(Scheme, optsGetter, codec, ttl)
	if err != nil {
		return err
	}
	core := genericapiserver.NewDefaultAPIGroupInfo(corev1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	core.VersionedResourcesStorageMap[corev1.SchemeGroupVersion.Version] = map[string]rest.Storage{"events": store}
	if err := s.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return fmt.Errorf("installing the events API: %w", err)
	}
	return nil
}

// Run serves until ctx is done, then shuts down gracefully and returns.
func (s *Server) Run(ctx context.Context) error {
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// AddPostStartHook runs fn once the server serves, with a context that ends at shutdown.
func (s *Server) AddPostStartHook(name string, fn func(ctx context.Context) error) error {
	return s.generic.AddPostStartHook(name, func(hc genericapiserver.PostStartHookContext) error {
		return fn(hc.Context)
	})
}

// AddPreShutdownHook runs fn when shutdown begins, while the API still serves.
func (s *Server) AddPreShutdownHook(name string, fn func() error) error {
	return s.generic.AddPreShutdownHook(name, fn)
}

// LoopbackConfig is a privileged client config for controllers in this process.
func (s *Server) LoopbackConfig() *clientrest.Config { return s.generic.LoopbackClientConfig }
