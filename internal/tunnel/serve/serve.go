// Package serve is the server's HTTP side of the reverse tunnel
// (internal/tunnel): the agent's request that carries it, and the Machine
// subresources that reach through it (exec, portforward, log), with the
// audit of every exec. It is apart from package tunnel so that the agent,
// which links tunnel, links none of the apiserver.
package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/record"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// What the Machine subresources are called; the same names as a Pod's, so
// that authorization rules read the same.
const (
	SubresourceExec        = "exec"
	SubresourcePortForward = "portforward"
	SubresourceLog         = "log"
)

var machines = schema.GroupResource{Group: api.GroupName, Resource: "machines"}

// staleSlack is how much newer another server's tunnel for a machine must
// be than this server's for this one's to be taken as dead: more than the
// error of converting a report's ages (a poll's round trip).
const staleSlack = 2 * time.Second

// Server serves a Hub's tunnels over the apiserver.
type Server struct {
	Hub *tunnel.Hub
	// Events, if set, records every exec on its Machine, where an
	// auditor reads the Machine's history (kubectl get events).
	Events record.EventRecorder
	// LastSeen, if set, says when a machine's agent was last heard, for
	// the answer to a request for a machine whose agent is away.
	LastSeen func(machine string) time.Time
	// Forwarding, if set, sends a request for a machine whose agent is
	// connected to another server there (HA).
	Forwarding *Forwarding
}

// ServeHTTP is tunnel.Path. internal/apiserver serves it ahead of the
// handler chain, having authenticated and authorized the caller as the
// chain would (it allows only a machine whose Machine exists and is not
// being deleted); it also ends the request when the Machine is deleted,
// which closes the tunnel.
func (h *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, _ := request.UserFrom(r.Context())
	name, uid, ok := caller.Machine(u)
	if !ok {
		http.Error(w, "only a machine's agent, with its certificate, may open a tunnel", http.StatusForbidden)
		return
	}
	h.Hub.Accept(w, r, name, uid)
}

// Connect serves one request for a Machine's subresource through its
// agent's tunnel. An error is returned before anything was written, for
// the caller to answer with; once the stream runs, errors end it.
func (h *Server) Connect(subresource string, m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) error {
	if f := h.Forwarding; f != nil && r.Header.Get(ForwardedHeader) == "" {
		// Another server's tunnel, if this one holds none, or if that one
		// is newer: the agent moved there, and this one's is dead but not
		// yet noticed (it takes up to ~45 s of silence from the agent).
		local, here := h.Hub.OpenedAt(m.Name)
		if address, opened, ok := f.Locate(m.Name); ok && (!here || opened.After(local.Add(staleSlack))) {
			f.forward(address, m, who, w, r)
			return nil
		}
	}
	switch subresource {
	case SubresourceExec:
		return h.exec(m, who, w, r)
	case SubresourcePortForward:
		return h.portForward(m, who, w, r)
	case SubresourceLog:
		return h.log(m, who, w, r)
	}
	return apierrors.NewNotFound(machines, m.Name+"/"+subresource)
}

// openError turns Open's errors into the answers a user can act on.
func (h *Server) openError(m *api.Machine, what string, err error) error {
	var refused *tunnel.RefusedError
	switch {
	case errors.Is(err, tunnel.ErrNotConnected):
		heard := "has not been heard since this server started"
		if h.LastSeen != nil {
			if t := h.LastSeen(m.Name); !t.IsZero() {
				heard = fmt.Sprintf("was last heard %s ago, at %s", time.Since(t).Round(time.Second), t.UTC().Format(time.RFC3339))
			}
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf(
			"the agent of machine %s is not connected to this server (it %s), so it cannot be reached for %s: "+
				"check that muster-agent runs on the machine and reaches the server (its log says), then try again", m.Name, heard, what))
	case errors.Is(err, tunnel.ErrBusy):
		e := apierrors.NewTooManyRequests(fmt.Sprintf("the tunnel to machine %s already carries its maximum of %d streams: "+
			"wait for some to finish, then try again", m.Name, h.maxStreams()), 1)
		return e
	case errors.As(err, &refused):
		return apierrors.NewForbidden(machines, m.Name, fmt.Errorf("the agent of machine %s refused the %s: %s", m.Name, what, refused.Reason))
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf("%v; try again", err))
}

func (h *Server) maxStreams() int {
	if h.Hub.MaxStreams > 0 {
		return h.Hub.MaxStreams
	}
	return tunnel.DefaultMaxStreams
}

func (h *Server) exec(m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) error {
	argv := r.URL.Query()["command"]
	if err := tunnel.ValidateCommand(argv); err != nil {
		if len(argv) > 0 && argv[0] != "" {
			return apierrors.NewRequestEntityTooLargeError(err.Error())
		}
		return apierrors.NewBadRequest(err.Error())
	}
	start := time.Now()
	s, err := h.Hub.Open(r.Context(), m.Name, tunnel.Request{Kind: tunnel.KindExec, Command: argv, User: who.GetName()})
	if err != nil {
		err = h.openError(m, "exec", err)
		h.audit(m, who, argv, start, 0, err)
		return err
	}
	defer s.Done()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", tunnel.ExecContentType)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	// The agent's frames are copied as they are; only the last (the exit
	// code) is read, for the record. Output is never logged.
	code, err := -1, error(nil)
	buf := make([]byte, tunnel.MaxFrameBytes)
	for {
		var typ byte
		var payload []byte
		typ, payload, err = tunnel.ReadFrame(s, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the agent closed the stream without an exit code")
			}
			if r.Context().Err() != nil {
				err = fmt.Errorf("the user disconnected: %w", r.Context().Err())
			}
			break
		}
		if err = tunnel.WriteFrame(w, typ, payload); err != nil {
			err = fmt.Errorf("the user disconnected: %w", err)
			break
		}
		if typ == tunnel.FrameExit {
			code, err = tunnel.ExitCode(payload)
			_ = rc.Flush()
			break
		}
		_ = rc.Flush()
	}
	h.audit(m, who, argv, start, code, err)
	return nil
}

// audit records an exec (who, where, which program, how it ended) in the
// server's log and as an Event on the Machine. Never its arguments, input
// or output: an argument is where a password goes (mysql -p...), and
// viewers read Events.
func (h *Server) audit(m *api.Machine, who user.Info, argv []string, start time.Time, code int, err error) {
	took := time.Since(start).Round(time.Millisecond)
	cmd := tunnel.DescribeCommand(argv)
	if err != nil {
		klog.InfoS("Exec on machine failed", "machine", m.Name, "user", who.GetName(), "groups", who.GetGroups(), "command", cmd, "duration", took, "err", err)
		if h.Events != nil {
			h.Events.Eventf(m, corev1.EventTypeWarning, "ExecFailed", "exec by %s of %s failed after %s: %v", who.GetName(), cmd, took, err)
		}
		return
	}
	klog.InfoS("Exec on machine", "machine", m.Name, "user", who.GetName(), "groups", who.GetGroups(), "command", cmd, "exitCode", code, "duration", took)
	if h.Events != nil {
		h.Events.Eventf(m, corev1.EventTypeNormal, "Exec", "exec by %s of %s exited %d after %s", who.GetName(), cmd, code, took)
	}
}

func (h *Server) portForward(m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) error {
	port, err := tunnel.ValidatePort(r.URL.Query().Get("port"))
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	s, err := h.Hub.Open(r.Context(), m.Name, tunnel.Request{Kind: tunnel.KindPortForward, Port: port, User: who.GetName()})
	if err != nil {
		return h.openError(m, fmt.Sprintf("port-forward to port %d", port), err)
	}
	defer s.Done()
	klog.V(2).InfoS("Port-forward to machine", "machine", m.Name, "port", port, "user", who.GetName())
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	go func() {
		// The user's bytes to the machine; their end is the agent's cue
		// to close its side of the connection.
		_, _ = io.Copy(s, r.Body)
		_ = s.Close()
	}()
	_, _ = io.Copy(flushWriter{w, rc}, s)
	return nil
}

func (h *Server) log(m *api.Machine, who user.Info, w http.ResponseWriter, r *http.Request) error {
	s, err := h.Hub.Open(r.Context(), m.Name, tunnel.Request{Kind: tunnel.KindLog, User: who.GetName()})
	if err != nil {
		return h.openError(m, "log", err)
	}
	defer s.Done()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(flushWriter{w, rc}, s)
	return nil
}

type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}
