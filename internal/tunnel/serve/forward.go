package serve

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ForwardedHeader marks a request one server forwarded to another: it is
// never forwarded again, so two servers with stale views cannot bounce it.
const ForwardedHeader = "X-Muster-Forwarded-By"

// Forwarding sends a request for a machine whose tunnel another server
// holds to that server.
type Forwarding struct {
	// Self names this server, in the forwarded request's header.
	Self string
	// Locate is the address (host:port) of another server that holds
	// machine's tunnel, and when that tunnel opened, from the servers'
	// liveness reports.
	Locate func(machine string) (string, time.Time, bool)
	// Transport carries this server's peer certificate.
	Transport http.RoundTripper

	h1Once sync.Once
	h1     http.RoundTripper
}

// forward proxies r to the server at address as the user who sent it
// (impersonation, which servers alone may do): that server authorizes the
// user again and records the exec, so the audit names the user wherever
// the request landed. Both bodies stream, flushed as they go.
func (f *Forwarding) forward(address string, m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) {
	f.Forward(address, m.Name, who, w, r)
}

// Forward proxies r to the server at address, which holds machine's
// tunnel, as the user who sent it (see forward). An upgraded request (an
// exec or a websocket through the proxy of a cluster's API) goes over
// HTTP/1.1, the only protocol that carries an upgrade.
func (f *Forwarding) Forward(address, machine string, who user.Info, w http.ResponseWriter, r *http.Request) {
	klog.InfoS("Forwarding to the server that holds the machine's tunnel", "machine", machine, "server", address, "user", who.GetName())
	transport := f.Transport
	if httpstream.IsUpgradeRequest(r) {
		transport = f.http1()
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", address, address
			for k := range pr.Out.Header {
				// The user's own credential stays here; the peer
				// certificate and the impersonation speak for them.
				if k == "Authorization" || strings.HasPrefix(k, "Impersonate-") {
					pr.Out.Header.Del(k)
				}
			}
			pr.Out.Header.Set("Impersonate-User", who.GetName())
			for _, g := range who.GetGroups() {
				if g != user.AllAuthenticated {
					pr.Out.Header.Add("Impersonate-Group", g)
				}
			}
			if uid := who.GetUID(); uid != "" {
				pr.Out.Header.Set("Impersonate-Uid", uid)
			}
			pr.Out.Header.Set(ForwardedHeader, f.Self)
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			e := apierrors.NewServiceUnavailable(fmt.Sprintf("the agent of machine %s is connected to server %s, which this server could not reach (%v): try again, or send the request to that server", machine, address, err))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":"ServiceUnavailable","code":503}`, e.ErrStatus.Message)
		},
	}
	proxy.ServeHTTP(w, r)
}

// http1 is Transport restricted to HTTP/1.1, for upgraded requests; a
// Transport that is not an *http.Transport is used as it is.
func (f *Forwarding) http1() http.RoundTripper {
	f.h1Once.Do(func() {
		t, ok := f.Transport.(*http.Transport)
		if !ok {
			f.h1 = f.Transport
			return
		}
		c := t.Clone()
		c.ForceAttemptHTTP2 = false
		c.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		if c.TLSClientConfig != nil {
			c.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		f.h1 = c
	})
	return f.h1
}
