package notify

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// loopbackAllowed is the server's --notification-allowed-networks of the
// tests, whose receivers listen on 127.0.0.1.
func loopbackAllowed(t *testing.T) Destinations {
	t.Helper()
	d, err := NewDestinations([]string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDestinationsCheck(t *testing.T) {
	strict, err := NewDestinations(nil)
	if err != nil {
		t.Fatal(err)
	}
	metadata, err := NewDestinations([]string{"169.254.169.254/32"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dest    Destinations
		ip      string
		refused string // the kind named, "" when allowed
	}{
		{strict, "127.0.0.1", "loopback"},
		{strict, "127.1.2.3", "loopback"},
		{strict, "::1", "loopback"},
		{strict, "::ffff:127.0.0.1", "loopback"},
		{strict, "169.254.169.254", "link-local"},
		{strict, "fe80::1", "link-local"},
		{strict, "0.0.0.0", "unspecified"},
		{strict, "::", "unspecified"},
		{strict, "224.0.0.1", "multicast"},
		{strict, "10.1.2.3", ""},
		{strict, "192.168.1.10", ""},
		{strict, "fd00::5", ""},
		{strict, "203.0.113.7", ""},
		{loopbackAllowed(t), "127.0.0.1", ""},
		{loopbackAllowed(t), "::1", "loopback"},
		{loopbackAllowed(t), "169.254.169.254", "link-local"},
		{metadata, "169.254.169.254", ""},
		{metadata, "169.254.1.1", "link-local"},
	} {
		err := tc.dest.check(netip.MustParseAddr(tc.ip))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused (%v), want allowed", tc.ip, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "--notification-allowed-networks")):
			t.Errorf("%s: %v, want a refusal naming %q and the flag", tc.ip, err, tc.refused)
		}
	}
}

func TestNewDestinationsRefusesWhatIsNotACIDR(t *testing.T) {
	for _, bad := range []string{"127.0.0.1", "localhost", "10.0.0.0/33", ""} {
		if _, err := NewDestinations([]string{bad}); err == nil || !strings.Contains(err.Error(), "CIDR") {
			t.Errorf("%q: %v, want an error saying a CIDR is wanted", bad, err)
		}
	}
}

// A subscription whose receiver is on the server's own host is not sent
// to: the POST never reaches it, by address or by a name resolving to it.
func TestSubscriberRefusesLoopbackReceiver(t *testing.T) {
	reached := make(chan struct{}, 10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached <- struct{}{} }))
	defer srv.Close()
	strict, _ := NewDestinations(nil)
	// Trusted, so that without the guard the POST would be delivered.
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	for _, url := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		s := newSubscriber("t", "https://muster", &nopObserver{}, strict, time.Millisecond, time.Millisecond)
		if err := s.configure(api.NotificationSubscriptionSpec{URL: url, CABundle: ca, SigningKey: strings.Repeat("k", 32)}); err != nil {
			t.Fatal(err)
		}
		err := s.send(context.Background(), s.target, queued{event: Event{Kind: api.NotifyMachineFailed, ID: "m", Subject: "m"}})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v, want a refusal of the loopback address", url, err)
		}
	}
	select {
	case <-reached:
		t.Fatal("the receiver on loopback was reached")
	default:
	}
}
