package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/routine"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

const (
	// MaxAgentWatches is how many watches one machine certificate may hold
	// at once. An agent holds two or three (its Machine, its MachinePlan,
	// ServerEndpoints); a few more cover a reconnect racing the old
	// connection's end.
	MaxAgentWatches = 8
	// MaxAgentWatchTimeout caps the timeoutSeconds an agent's watch runs
	// for, so that its authorization is checked again at least this often
	// whatever the client asked.
	MaxAgentWatchTimeout = 10 * time.Minute
	// voidedMemory is how long a voided machine UID is remembered, to end a
	// request that was authorized just before the Machine's deletion was
	// seen and registered just after. Far longer than that race needs.
	voidedMemory = 10 * time.Minute
)

// agentRequests are the requests in flight of machine certificates, by
// machine UID: what voiding a certificate ends, and what the watch limit
// counts. A certificate is void once its Machine is deleted or recreated
// with another UID; authorization refuses every later request, and this
// ends the ones already running (watches, above all), on every server,
// since every server keeps the Machine informer that calls void.
type agentRequests struct {
	mu     sync.Mutex
	byUID  map[string]*machineRequests
	byName map[string]map[string]struct{} // machine name → UIDs with requests
	voided map[string]time.Time
	now    func() time.Time
}

type machineRequests struct {
	name    string
	running map[*agentRequest]struct{}
	watches int
}

type agentRequest struct {
	cancel context.CancelFunc
	watch  bool
}

func newAgentRequests() *agentRequests {
	return &agentRequests{byUID: map[string]*machineRequests{}, byName: map[string]map[string]struct{}{},
		voided: map[string]time.Time{}, now: time.Now}
}

// begin records a request of machine name/uid; done must be called when it ends.
func (t *agentRequests) begin(name, uid string, watch bool, cancel context.CancelFunc) (*agentRequest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.voided[uid]; ok {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: api.GroupName, Resource: "machines"}, name,
			fmt.Errorf("machine %s no longer exists: its certificate is void; register again with a new join token", name))
	}
	m := t.byUID[uid]
	if m == nil {
		m = &machineRequests{name: name, running: map[*agentRequest]struct{}{}}
		t.byUID[uid] = m
		if t.byName[name] == nil {
			t.byName[name] = map[string]struct{}{}
		}
		t.byName[name][uid] = struct{}{}
	}
	if watch && m.watches >= MaxAgentWatches {
		t.forgetIfIdle(uid, m)
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"machine %s already holds %d watches, the most one machine may hold; an agent needs 2 or 3: stop the other clients using this machine's certificate, or retry once a watch has ended",
			name, MaxAgentWatches), 10)
	}
	r := &agentRequest{cancel: cancel, watch: watch}
	m.running[r] = struct{}{}
	if watch {
		m.watches++
	}
	return r, nil
}

func (t *agentRequests) done(uid string, r *agentRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.byUID[uid]
	if m == nil {
		return
	}
	if _, ok := m.running[r]; ok {
		delete(m.running, r)
		if r.watch {
			m.watches--
		}
	}
	t.forgetIfIdle(uid, m)
}

func (t *agentRequests) forgetIfIdle(uid string, m *machineRequests) {
	if len(m.running) > 0 {
		return
	}
	delete(t.byUID, uid)
	delete(t.byName[m.name], uid)
	if len(t.byName[m.name]) == 0 {
		delete(t.byName, m.name)
	}
}

// void ends every request of the certificates bound to machine UID uid,
// and refuses any that is about to begin.
func (t *agentRequests) void(uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for u, at := range t.voided {
		if now.Sub(at) > voidedMemory {
			delete(t.voided, u)
		}
	}
	t.voided[uid] = now
	m := t.byUID[uid]
	if m == nil {
		return
	}
	if n := len(m.running); n > 0 {
		klog.InfoS("Ending the requests of a voided machine certificate", "machine", m.name, "uid", uid, "requests", n)
	}
	for r := range m.running {
		r.cancel()
		delete(m.running, r)
	}
	m.watches = 0
	t.forgetIfIdle(uid, m)
}

// keepOnly voids every certificate of machine name bound to another UID than uid.
func (t *agentRequests) keepOnly(name, uid string) {
	t.mu.Lock()
	var others []string
	for u := range t.byName[name] {
		if u != uid {
			others = append(others, u)
		}
	}
	t.mu.Unlock()
	for _, u := range others {
		t.void(u)
	}
}

// voidOnMachineChange ends the requests of a certificate as soon as this
// server's Machine informer sees its Machine deleted, or replaced by one of
// the same name and another UID.
func (a *AgentAuthorizer) voidOnMachineChange(machines cache.SharedIndexInformer) error {
	_, err := machines.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if m, ok := obj.(*api.Machine); ok {
				a.requests.keepOnly(m.Name, string(m.UID))
			}
		},
		UpdateFunc: func(old, obj interface{}) {
			// After a relist, a Machine recreated meanwhile arrives as an
			// update of the old one.
			if o, ok := old.(*api.Machine); ok {
				if m, ok := obj.(*api.Machine); ok && m.UID != o.UID {
					a.requests.void(string(o.UID))
				}
			}
			if m, ok := obj.(*api.Machine); ok {
				a.requests.keepOnly(m.Name, string(m.UID))
			}
		},
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, ok := obj.(*api.Machine); ok {
				a.requests.void(string(m.UID))
			}
		},
	})
	return err
}

// withAgentRequests runs inside the handler chain, after authentication
// and authorization: it binds every request of a machine certificate to
// the Machine UID the certificate names (voiding the certificate cancels
// the request's context, which ends a watch), caps the watches one machine
// holds and how long each may run.
func withAgentRequests(h http.Handler, a *AgentAuthorizer, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		name, uid, ok := caller.Machine(u)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		info, _ := request.RequestInfoFrom(r.Context())
		if info != nil && info.IsResourceRequest && info.Verb == "create" && info.APIGroup == api.GroupName && info.Resource == "clusterregistrations" && info.Subresource == "" {
			// A renewal, or a rejoin after a restore: a short request,
			// refused if the certificate is void, but not ended by a
			// voiding that comes while it runs. A rejoin makes the Machine
			// again under a new UID, and that Machine's arrival voids the
			// old UID the request itself carries.
			req, err := a.requests.begin(name, uid, false, func() {})
			if err != nil {
				refuse(w, r, err)
				return
			}
			a.requests.done(uid, req)
			h.ServeHTTP(w, r)
			return
		}
		watch := info != nil && info.Verb == "watch"
		if watch {
			capWatchTimeout(r)
		}
		ctx, cancel := context.WithCancel(r.Context())
		req, err := a.requests.begin(name, uid, watch, cancel)
		if err != nil {
			cancel()
			refuse(w, r, err)
			return
		}
		end := func() {
			a.requests.done(uid, req)
			cancel()
		}
		h.ServeHTTP(w, r.WithContext(ctx))
		// A watch is served after the chain returns, on the goroutine the
		// chain started on (APIServingWithRoutine): end it after that.
		if !routine.AppendTask(ctx, &routine.Task{Func: end}) {
			end()
		}
	})
}

// capWatchTimeout makes a watch's timeoutSeconds at most MaxAgentWatchTimeout.
func capWatchTimeout(r *http.Request) {
	max := int64(MaxAgentWatchTimeout / time.Second)
	q := r.URL.Query()
	if v, err := strconv.ParseInt(q.Get("timeoutSeconds"), 10, 64); err == nil && v > 0 && v <= max {
		return
	}
	q.Set("timeoutSeconds", strconv.FormatInt(max, 10))
	r.URL.RawQuery = q.Encode()
}
