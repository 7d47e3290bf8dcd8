// Package k8sproxy serves a cluster's own Kubernetes API through
// muster-server, as Rancher serves /k8s/clusters/<id>: a request to
// /k8s/clusters/<name>/<path> goes to the kube-apiserver of one of the
// cluster's control-plane machines (candidates says which may serve, best
// first), over that machine's agent tunnel (internal/tunnel), so the
// cluster's API never needs an address its users can reach.
//
// Muster authenticates the user and authorizes them with its own roles
// before the request gets here: the apiserver's chain sees the request as
// a verb on clusters/proxy (RequestInfoResolver), so viewers read,
// operators write, and agents, join tokens and users without a role are
// refused there. Here the server speaks to the kube-apiserver with the
// credential the Cluster names (spec.kubernetesAPI.credential, which only
// administrators read) and impersonates the user with it, so the
// cluster's own RBAC decides what the user may do there, and its audit
// names them.
package k8sproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/tunnel"
	"github.com/muster-io/muster/internal/tunnel/serve"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Prefix is where the clusters' APIs are served: Prefix + NAME + "/" + the
// cluster's own path (/api, /apis, /readyz, ...).
const Prefix = "/k8s/clusters/"

// AdminsGroup is the group the server sends downstream for a Muster
// administrator (system:masters here): the cluster's own system: groups
// are its own, so none is ever sent, and the cluster's operator grants
// Muster's administrators what they choose by binding this group.
const AdminsGroup = "muster:admins"

var clusters = schema.GroupResource{Group: api.GroupName, Resource: "clusters"}

// Split parses Prefix + NAME + rest; ok is false when the path names no
// cluster. rest starts with "/" (or is "/" for the bare prefix).
func Split(path string) (name, rest string, ok bool) {
	tail, found := strings.CutPrefix(path, Prefix)
	if !found {
		return "", "", false
	}
	name, rest, _ = strings.Cut(tail, "/")
	if name == "" {
		return "", "", false
	}
	return name, "/" + rest, true
}

// Verb is the verb on clusters/proxy a request needs, as kube-apiserver
// asks for pods/proxy: reads are "get"; a write is its method's verb; an
// upgraded request (exec, attach, port-forward, a websocket) is "create"
// whatever its method, since it carries a stream the other way.
func Verb(r *http.Request) string {
	if httpstream.IsUpgradeRequest(r) {
		return "create"
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return "create"
}

// RequestInfoResolver makes every request under Prefix a resource request
// for clusters/proxy of the named cluster, so that the apiserver's own
// authorization (the built-in roles, or a kube-apiserver's RBAC behind
// the aggregator) and audit judge it; other requests go to next.
func RequestInfoResolver(next request.RequestInfoResolver) request.RequestInfoResolver {
	return resolver{next}
}

type resolver struct{ next request.RequestInfoResolver }

func (r resolver) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	name, _, ok := Split(req.URL.Path)
	if !ok {
		return r.next.NewRequestInfo(req)
	}
	return &request.RequestInfo{
		IsResourceRequest: true, Path: req.URL.Path, Verb: Verb(req),
		APIPrefix: "k8s", APIGroup: api.GroupName, APIVersion: api.SchemeGroupVersion.Version,
		Resource: clusters.Resource, Subresource: api.ClusterProxySubresource, Name: name,
		Parts: []string{clusters.Resource, name, api.ClusterProxySubresource},
	}, nil
}

// Source is where the proxy reads Clusters and their machines (the
// server's watch cache).
type Source interface {
	Cluster(ctx context.Context, name string, fresh bool) (*api.Cluster, error)
	MachinesWithRole(ctx context.Context, cluster, role string) ([]api.Machine, error)
	Plan(ctx context.Context, name string, fresh bool) (*api.MachinePlan, error)
}

// Proxy serves Prefix.
type Proxy struct {
	Source Source
	// Hub holds this server's agent tunnels.
	Hub *tunnel.Hub
	// Forwarding, if set, sends a request whose cluster has no
	// control-plane machine connected here to a server that holds one.
	Forwarding *serve.Forwarding
	// Refuse answers an error as a Kubernetes Status.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)

	mu sync.Mutex
	// transports are the connections to each cluster's kube-apiserver,
	// one pool per cluster and machine, made again when the cluster's
	// spec.kubernetesAPI changes.
	transports map[string]*downstream
}

type downstream struct {
	spec      [32]byte
	transport *http.Transport
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := p.serve(w, r); err != nil {
		p.Refuse(w, r, err)
	}
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) error {
	name, rest, ok := Split(r.URL.Path)
	if !ok {
		return apierrors.NewNotFound(clusters, "")
	}
	who, ok := request.UserFrom(r.Context())
	if !ok {
		return apierrors.NewUnauthorized("the cluster's API is reached with a user's credential")
	}
	// The authorizer refused these already (no role grants them
	// clusters/proxy); asked again here, so that no later grant can
	// give a machine or a join token a cluster's API.
	if _, _, machine := caller.Machine(who); machine || caller.IsBootstrapper(who) || caller.IsServer(who) {
		return apierrors.NewForbidden(clusters, name, errors.New("an agent's certificate, a join token or a server's certificate never reaches a cluster's API: use a user's kubeconfig (kubectl muster kubeconfig "+name+")"))
	}
	if strings.HasPrefix(who.GetName(), "system:") {
		return apierrors.NewForbidden(clusters, name, fmt.Errorf("user %q has a name Kubernetes keeps for its own components (system:), which the server does not impersonate on a cluster: reach the cluster's API as a user with another name", who.GetName()))
	}
	c, err := p.Source.Cluster(r.Context(), name, false)
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(clusters, name)
	}
	if err != nil {
		return err
	}
	k := c.Spec.KubernetesAPI
	if k == nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s declares no Kubernetes API (spec.kubernetesAPI is not set), so the server cannot reach it: an administrator sets its port, CA and credential (docs/clusters.md)", name))
	}
	port := int(k.Port)
	if port == 0 {
		port = api.DefaultKubernetesAPIPort
	}
	impersonate(r, who, k.Credential.Token)
	return p.via(w, r, c, who, rest, port, "")
}

// via proxies r to cluster c's kube-apiserver through a machine pick
// chooses, never the one named by tried. A read that could not reach the
// kube-apiserver of the machine chosen (it stopped between its last probe
// and this request, as during an upgrade) is sent once more, through
// another machine: nothing of it reached the cluster, and nothing was
// answered yet.
func (p *Proxy) via(w http.ResponseWriter, r *http.Request, c *api.Cluster, who user.Info, rest string, port int, tried string) error {
	machine, address, err := p.pick(r, c, tried)
	if err != nil {
		return err
	}
	if address != "" {
		p.Forwarding.Forward(address, machine, who, w, r)
		return nil
	}
	tr, err := p.transport(c, machine, port)
	if err != nil {
		return err
	}
	e := responder{p: p, cluster: c.Name, machine: machine}
	if tried == "" && retriable(r) {
		e.retry = func() error { return p.via(w, r, c, who, rest, port, machine) }
	}
	loc := &url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: rest, RawQuery: r.URL.RawQuery}
	h := proxy.NewUpgradeAwareHandler(loc, tr, false, false, e)
	h.UseLocationHost = true
	h.ServeHTTP(w, r)
	return nil
}

// retriable reports whether r may be sent again through another machine
// when the first could not answer it: a read without a body and without an
// upgrade, so that sending it twice changes nothing.
func retriable(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.ContentLength == 0 && !httpstream.IsUpgradeRequest(r)
}

// pick chooses the control-plane machine to reach the cluster through
// (never the one named by tried): the first of candidates whose tunnel
// this server holds, else one whose tunnel another server holds (address
// is that server's; never for a request already forwarded).
func (p *Proxy) pick(r *http.Request, c *api.Cluster, tried string) (machine, address string, err error) {
	ms, err := p.Source.MachinesWithRole(r.Context(), c.Name, api.ControlPlaneRole)
	if err != nil {
		return "", "", err
	}
	ms = slices.DeleteFunc(ms, func(m api.Machine) bool { return m.Name == tried })
	cands, probed, states := candidates(ms, func(name string) (bool, bool) { return p.apiServerProbe(r, name) })
	if machine, address, ok := p.reach(r, cands); ok {
		return machine, address, nil
	}
	switch {
	case len(ms) == 0 && tried != "":
		return "", "", fmt.Errorf("cluster %s has no other control-plane machine: try again, or see why with kubectl describe machine %s", c.Name, tried)
	case len(ms) == 0:
		return "", "", apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s has no machine with role %s (label %s%s=true), so its API cannot be reached: give its control-plane machines that role (muster-agent --role %s)",
			c.Name, api.ControlPlaneRole, api.RoleLabelPrefix, api.ControlPlaneRole, api.ControlPlaneRole))
	case len(cands) == 0 && probed:
		return "", "", apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s has no control-plane machine whose %s probe last passed (%s), so its API cannot be reached: wait for one, or see why with kubectl describe machine and its MachinePlan's status.probes",
			c.Name, api.KubeAPIServerProbe, strings.Join(states, "; ")))
	case len(cands) == 0:
		return "", "", apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s has no Running control-plane machine (%s), so its API cannot be reached: wait for one to be Running, or see why with kubectl describe machine",
			c.Name, strings.Join(states, "; ")))
	}
	return "", "", apierrors.NewServiceUnavailable(fmt.Sprintf("the agents of cluster %s's control-plane machines that could serve (%s) hold no tunnel to any server right now, so its API cannot be reached: check that muster-agent runs on them and reaches the server, then try again",
		c.Name, strings.Join(cands, ", ")))
}

// candidates are the machines (sorted by name, so connections are reused)
// the cluster's API may be reached through, best first; probed says
// whether any plan reports its kube-apiserver's readiness, states says
// what each machine is. Machines being deleted are never candidates.
//   - When the machines' plans report their kube-apiserver's readiness
//     (a probe named api.KubeAPIServerProbe, as the planner's do): first
//     those whose probe last passed, the Running ones before those that
//     are not Unavailable (a machine applying a changed plan is Updating
//     while its kube-apiserver still answers). Only when none passed, the
//     Running ones whose probe fails: a probe that times out on a busy
//     host, or a /readyz that fails one check, leaves a kube-apiserver
//     that still answers reads, and trying it is better than refusing
//     every request. A machine Updating with its probe failing is in the
//     middle of a change and is not tried; a Running machine without the
//     probe (a new member whose plan runs only etcd yet) has no
//     kube-apiserver to reach.
//   - Otherwise (a cluster whose plans say nothing of it), the Running ones.
func candidates(ms []api.Machine, probe func(machine string) (ready, has bool)) (cands []string, probed bool, states []string) {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b api.Machine) int { return strings.Compare(a.Name, b.Name) })
	var running, readyRunning, readyOther, failingRunning []string
	for _, m := range ms {
		if m.DeletionTimestamp != nil {
			states = append(states, m.Name+" is being deleted")
			continue
		}
		ready, has := probe(m.Name)
		probed = probed || has
		state := fmt.Sprintf("%s is %s", m.Name, m.Status.Phase)
		switch {
		case has && !ready:
			state += ", its kube-apiserver probe failing"
		case !has:
			state += ", its plan has no kube-apiserver probe"
		}
		states = append(states, state)
		switch {
		case m.Status.Phase == api.MachinePhaseRunning:
			running = append(running, m.Name)
			switch {
			case ready:
				readyRunning = append(readyRunning, m.Name)
			case has:
				failingRunning = append(failingRunning, m.Name)
			}
		case ready && m.Status.Phase != api.MachinePhaseUnavailable:
			readyOther = append(readyOther, m.Name)
		}
	}
	switch {
	case !probed:
		return running, probed, states
	case len(readyRunning)+len(readyOther) > 0:
		return slices.Concat(readyRunning, readyOther), probed, states
	}
	return failingRunning, probed, states
}

// reach returns the first of machines whose tunnel this server holds,
// else the first whose tunnel another server holds, with that server's
// address (never for a request already forwarded).
func (p *Proxy) reach(r *http.Request, machines []string) (machine, address string, ok bool) {
	for _, m := range machines {
		if p.Hub.Connected(m) {
			return m, "", true
		}
	}
	if f := p.Forwarding; f != nil && r.Header.Get(serve.ForwardedHeader) == "" {
		for _, m := range machines {
			if address, _, ok := f.Locate(m); ok {
				return m, address, true
			}
		}
	}
	return "", "", false
}

// apiServerProbe reports whether machine's plan (named after it) has the
// kube-apiserver probe (has), and whether it last passed (ready).
func (p *Proxy) apiServerProbe(r *http.Request, machine string) (ready, has bool) {
	plan, err := p.Source.Plan(r.Context(), machine, false)
	if err != nil {
		return false, false
	}
	for _, ps := range plan.Status.Probes {
		if ps.Name == api.KubeAPIServerProbe {
			return ps.Healthy, true
		}
	}
	return false, false
}

// impersonate makes r speak for who downstream: whatever credential or
// impersonation the client sent is dropped (its Muster credential is
// Muster's alone, and the cluster must believe the server only), and the
// user's name and groups are sent as impersonation. Groups of the
// system: namespace are the cluster's own and are not sent, but Muster's
// administrators are sent as AdminsGroup.
func impersonate(r *http.Request, who user.Info, token string) {
	for k := range r.Header {
		if strings.HasPrefix(k, "Impersonate-") || k == "Authorization" || k == "Cookie" || k == serve.ForwardedHeader {
			r.Header.Del(k)
		}
	}
	r.Header.Set("Impersonate-User", who.GetName())
	for _, g := range who.GetGroups() {
		switch {
		case g == user.SystemPrivilegedGroup:
			r.Header.Add("Impersonate-Group", AdminsGroup)
		case strings.HasPrefix(g, "system:"):
		default:
			r.Header.Add("Impersonate-Group", g)
		}
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
}

// transport is the connection pool to cluster c's kube-apiserver on
// machine, verifying it with the cluster's CA and presenting its client
// certificate. HTTP/2 when the kube-apiserver speaks it, so that every
// request and watch of a cluster shares one tunnel stream; upgraded
// requests dial their own (HTTP/1.1, as the upgrade-aware handler does).
func (p *Proxy) transport(c *api.Cluster, machine string, port int) (*http.Transport, error) {
	k := c.Spec.KubernetesAPI
	b, _ := json.Marshal(k)
	sum := sha256.Sum256(b)
	key := c.Name + "/" + machine
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.transports[key]; d != nil {
		if d.spec == sum {
			return d.transport, nil
		}
		d.transport.CloseIdleConnections()
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(k.CACertificate)) {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s's spec.kubernetesAPI.caCertificate holds no PEM certificate: an administrator must set the CA of its kube-apiserver", c.Name))
	}
	serverName := k.ServerName
	if serverName == "" {
		serverName = "127.0.0.1"
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if k.Credential.ClientCertificate != "" {
		pair, err := tls.X509KeyPair([]byte(k.Credential.ClientCertificate), []byte(k.Credential.ClientKey))
		if err != nil {
			// Not err's words: they may quote the key.
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s's spec.kubernetesAPI.credential is not a PEM client certificate and its key: an administrator must set it again", c.Name))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	hub := p.Hub
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			s, err := hub.Open(ctx, machine, tunnel.Request{Kind: tunnel.KindKubeAPI, Port: port, User: "the proxy of cluster " + c.Name + "'s API"})
			if err != nil {
				return nil, dialError(c.Name, machine, port, err)
			}
			return &streamConn{Stream: s}, nil
		},
		TLSClientConfig:     cfg,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	if p.transports == nil {
		p.transports = map[string]*downstream{}
	}
	p.transports[key] = &downstream{spec: sum, transport: tr}
	return tr, nil
}

// dialError says why the tunnel gave no connection, in words a user can act on.
func dialError(cluster, machine string, port int, err error) error {
	var refused *tunnel.RefusedError
	switch {
	case errors.Is(err, tunnel.ErrNotConnected):
		return fmt.Errorf("the agent of machine %s is no longer connected to this server: try again (another control-plane machine is chosen if one is connected)", machine)
	case errors.Is(err, tunnel.ErrBusy):
		return fmt.Errorf("the tunnel to machine %s carries its maximum of streams: try again shortly", machine)
	case errors.As(err, &refused):
		return fmt.Errorf("the agent of machine %s refused to reach cluster %s's kube-apiserver on port %d: %s", machine, cluster, port, refused.Reason)
	}
	return err
}

// streamConn is a tunnel stream as the net.Conn the transport wants; its
// Close gives the stream's slot back.
type streamConn struct {
	*tunnel.Stream
	once sync.Once
}

func (c *streamConn) Close() error {
	c.once.Do(c.Stream.Done)
	return nil
}

// responder answers a request the cluster's kube-apiserver could not be
// reached for.
type responder struct {
	p                *Proxy
	cluster, machine string
	// retry, if set, sends the request through another machine; its error
	// is answered instead of this one's.
	retry func() error
}

func (e responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.InfoS("Cannot reach a cluster's API", "cluster", e.cluster, "machine", e.machine, "err", err)
	if e.retry != nil && r.Context().Err() == nil {
		if again := e.retry(); again != nil {
			e.p.Refuse(w, r, apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s's kube-apiserver could not be reached through machine %s (%v), nor through another: %v", e.cluster, e.machine, err, again)))
		}
		return
	}
	e.p.Refuse(w, r, apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %s's kube-apiserver could not be reached through machine %s: %v", e.cluster, e.machine, err)))
}
