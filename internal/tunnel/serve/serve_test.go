package serve

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/record"

	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// The answers a user gets before anything reaches an agent: each a status
// code and a message that says what to do, and a failed exec recorded.
func TestConnectRefusals(t *testing.T) {
	m := &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}
	who := &user.DefaultInfo{Name: "otto", Groups: []string{"muster:operators"}}
	events := record.NewFakeRecorder(10)
	heard := time.Now().Add(-time.Minute)
	s := &Server{Hub: tunnel.NewHub(), Events: events, LastSeen: func(string) time.Time { return heard }}
	for _, tc := range []struct {
		name, sub string
		query     url.Values
		code      int32
		says      string
	}{
		{"no command", "exec", nil, 400, "no command to run"},
		{"empty command", "exec", url.Values{"command": {""}}, 400, "no command to run"},
		{"huge command", "exec", url.Values{"command": {"echo", strings.Repeat("a", tunnel.MaxArgvBytes)}}, 413, "at most 65536"},
		{"agent away", "exec", url.Values{"command": {"true"}}, 503, "not connected to this server (it was last heard 1m0s ago"},
		{"port 0", "portforward", url.Values{"port": {"0"}}, 400, "1 to 65535"},
		{"port 70000", "portforward", url.Values{"port": {"70000"}}, 400, "1 to 65535"},
		{"no port", "portforward", nil, 400, "1 to 65535"},
		{"log, agent away", "log", nil, 503, "not connected"},
		{"unknown subresource", "shell", nil, 404, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/apis/muster.io/v1alpha1/machines/edge-1/"+tc.sub+"?"+tc.query.Encode(), nil)
			err := s.Connect(tc.sub, m, who, httptest.NewRecorder(), r)
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != tc.code || !strings.Contains(status.Status().Message, tc.says) {
				t.Fatalf("Connect = %v, want %d saying %q", err, tc.code, tc.says)
			}
		})
	}
	// Only the exec that reached the point of asking the agent is recorded.
	select {
	case e := <-events.Events:
		if !strings.Contains(e, "ExecFailed") || !strings.Contains(e, "exec by otto of true with no arguments") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("the failed exec was not recorded")
	}
	if _, ok := s.Hub.Open(context.Background(), "edge-1", tunnel.Request{Kind: tunnel.KindLog}); !errors.Is(ok, tunnel.ErrNotConnected) {
		t.Errorf("Open on an empty hub: %v", ok)
	}
}

// An exec's record names the program and counts its arguments, never
// shows them: an argument is where a password goes, and viewers read
// Events.
func TestDescribeCommand(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"uptime"}, "uptime with no arguments"},
		{[]string{"sh", "-c", "mysql -pS3cret"}, "sh with 2 arguments"},
		{[]string{"/usr/bin/mysql", "-pS3cret"}, "mysql with 1 argument"},
		{[]string{"mysql -pS3cret"}, "a program named in 14 bytes (not shown: it does not look like a program's name) with no arguments"},
		{[]string{"/opt/x/PASSWORD=hunter2"}, "a program named in 23 bytes (not shown: it does not look like a program's name) with no arguments"},
		{[]string{strings.Repeat("a", 2000)}, "a program named in 2000 bytes (not shown: it does not look like a program's name) with no arguments"},
	} {
		if got := tunnel.DescribeCommand(tc.argv); got != tc.want {
			t.Errorf("DescribeCommand(%q) = %s, want %s", tc.argv, got, tc.want)
		}
	}
}
