package notify

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Destinations decides which addresses the server sends events to.
//
// Whoever may write a NotificationSubscription (operators) chooses a URL
// the server then POSTs to from inside its own network: without a
// guard, that is a way to reach what only the server's host can, such as
// its own loopback listeners or a cloud's metadata service on the
// link-local 169.254.169.254. So loopback, link-local, unspecified and
// multicast addresses are refused unless the operator of the server
// allowed them (--notification-allowed-networks). The check is made on
// the address actually dialled, after name resolution, so a name that
// resolves to a refused address (or is re-pointed at one later) is
// refused too. Private ranges (10/8, 192.168/16, fc00::/7) are where
// receivers usually live, and stay allowed.
type Destinations struct {
	allowed []netip.Prefix
}

// NewDestinations takes the allowed networks as CIDRs (127.0.0.0/8, ::1/128).
func NewDestinations(cidrs []string) (Destinations, error) {
	var d Destinations
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return Destinations{}, fmt.Errorf("notification allowed network %q is not a CIDR (such as 127.0.0.0/8): %w", c, err)
		}
		d.allowed = append(d.allowed, p.Masked())
	}
	return d, nil
}

// check returns why ip may not be sent to, or nil.
func (d Destinations) check(ip netip.Addr) error {
	ip = ip.Unmap()
	var kind string
	switch {
	case ip.IsLoopback():
		kind = "loopback"
	case ip.IsLinkLocalUnicast():
		kind = "link-local (where clouds serve instance metadata)"
	case ip.IsUnspecified():
		kind = "unspecified"
	case ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast():
		kind = "multicast"
	default:
		return nil
	}
	for _, p := range d.allowed {
		if p.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("the receiver's address %s is %s: the server does not send events to such addresses unless its operator allows them with --notification-allowed-networks", ip, kind)
}

// control is the dialer's check of each address it connects to.
func (d Destinations) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialling %q: %w", address, err)
	}
	return d.check(ap.Addr())
}

// guard makes t connect only to allowed addresses. Through an HTTP proxy the proxy makes the connection, so
// the receiver's host is resolved and checked here before the request
// is handed to it.
func (d Destinations) guard(t *http.Transport) *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: d.control}
	t.DialContext = dialer.DialContext
	t.Proxy = func(req *http.Request) (*url.URL, error) {
		proxy, err := http.ProxyFromEnvironment(req)
		if err != nil || proxy == nil {
			return proxy, err
		}
		return proxy, d.resolveAndCheck(req.Context(), req.URL.Hostname())
	}
	return t
}

func (d Destinations) resolveAndCheck(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		return d.check(ip)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolving the receiver's host %s: %w", host, err)
	}
	for _, a := range addrs {
		if err := d.check(a); err != nil {
			return err
		}
	}
	return nil
}
