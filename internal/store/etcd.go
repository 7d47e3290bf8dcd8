package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// TLSFiles are the files an external etcd is reached with: the CA that
// signed etcd's serving certificate, and the client certificate and key
// etcd's --client-cert-auth checks. Paths only: the key itself never goes
// on a command line or into a log.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

func (f TLSFiles) empty() bool { return f.CAFile == "" && f.CertFile == "" && f.KeyFile == "" }

// EtcdUnsupported is what a server on an external etcd does without: both
// live in SQL tables beside kine's, and etcd has no SQL.
const EtcdUnsupported = "the transition history (muster_transitions, muster-server history) and muster's SQL schema migrations need SQLite or PostgreSQL and are off on an external etcd; each object's status.transitions still holds its last transitions, and datastore snapshot/restore work through the etcd API"

// openEtcd checks the TLS files and that etcd answers with them, so that a
// refused certificate is reported once, naming the flag to fix, rather than
// as the apiserver's endless retries.
func openEtcd(ctx context.Context, cfg Config) (*Datastore, error) {
	tlsConfig, err := loadTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	endpoints := strings.Split(cfg.Endpoint, ",")
	for _, e := range endpoints {
		if strings.HasPrefix(e, "http://") && tlsConfig != nil {
			return nil, fmt.Errorf("--datastore-endpoint %s is plain http:// but TLS files were given: use https:// so the client certificate is used", redact(e, e))
		}
	}
	ds := &Datastore{backend: "etcd", endpoints: endpoints, tlsFiles: cfg.TLS, tls: tlsConfig, cancel: func() {}}
	client, err := ds.Client()
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %s", redact(cfg.Endpoint, cfg.Endpoint), redact(err.Error(), cfg.Endpoint))
	}
	defer client.Close()
	rctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var last error
	nextSay := time.Now().Add(waitingSayEvery)
	for {
		// Status is the cheapest call that needs an accepted client
		// certificate, and it carries the version for the startup log.
		sctx, scancel := context.WithTimeout(rctx, 5*time.Second)
		st, err := client.Status(sctx, endpoints[0])
		scancel()
		if err == nil {
			ds.etcdVersion = st.Version
			return ds, nil
		}
		last = err
		// The etcd client reports a refused handshake as a deadline; a
		// handshake of our own tells why. A certificate etcd refuses, or
		// one this server does not trust, stays so: say it now instead of
		// after the whole timeout.
		if perr := probeTLS(rctx, endpoints[0], tlsConfig); perr != nil && isTLSError(perr) {
			return nil, etcdDialError(cfg, perr)
		}
		if rctx.Err() != nil {
			return nil, etcdDialError(cfg, last)
		}
		if time.Now().After(nextSay) {
			// A server that says nothing while it dials looks hung.
			klog.Warningf("still waiting for the datastore at %s (etcd): %s", redact(cfg.Endpoint, cfg.Endpoint), redact(err.Error(), cfg.Endpoint))
			nextSay = time.Now().Add(waitingSayEvery)
		}
		select {
		case <-rctx.Done():
			return nil, etcdDialError(cfg, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// http2Preface is what a gRPC client sends first: the HTTP/2 preface and
// an empty SETTINGS frame. etcd answers it only once it accepted the
// client certificate; otherwise the read gets its TLS alert.
var http2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// probeTLS does one TLS handshake with etcd and reads its first answer;
// nil when etcd answered or the endpoint is not https.
func probeTLS(ctx context.Context, endpoint string, c *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, ServerName: u.Hostname()}
	if c != nil {
		cfg = c.Clone()
		cfg.NextProtos, cfg.ServerName = []string{"h2"}, u.Hostname()
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(dctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write(http2Preface); err != nil {
		return err
	}
	if _, err := conn.Read(make([]byte, 9)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

func isTLSError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "bad certificate") || strings.Contains(msg, "certificate required") ||
		strings.Contains(msg, "x509:") || strings.Contains(msg, "tls: ") || strings.Contains(msg, "TLS handshake")
}

// etcdDialError names what to fix from how etcd refused: a TLS error is
// about the certificate flags, anything else about the endpoint.
func etcdDialError(cfg Config, err error) error {
	msg := redact(err.Error(), cfg.Endpoint)
	where := redact(cfg.Endpoint, cfg.Endpoint)
	switch {
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "certificate required") || strings.Contains(msg, "unknown certificate") || strings.Contains(msg, "tls: unknown"):
		return fmt.Errorf("etcd at %s refused this server's client certificate (%s): give --datastore-certfile and --datastore-keyfile a certificate signed by the CA etcd's --trusted-ca-file names", where, msg)
	case strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, "x509:"):
		return fmt.Errorf("etcd at %s has a serving certificate this server does not trust (%s): give --datastore-cafile the CA that signed it, and check the endpoint's host name is in it", where, msg)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("etcd at %s does not speak TLS (%s): use http:// in --datastore-endpoint, or turn on TLS in etcd", where, msg)
	}
	return fmt.Errorf("cannot reach etcd at %s within %s: %s; check that etcd is running, that --datastore-endpoint has the right host and port, and that --datastore-cafile/--datastore-certfile/--datastore-keyfile are what etcd expects", where, connectTimeout, msg)
}

// loadTLS reads the TLS files; nil when none is given (plain http://, or
// https:// trusting the system's CAs without a client certificate).
func loadTLS(f TLSFiles) (*tls.Config, error) {
	if f.empty() {
		return nil, nil
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("--datastore-certfile and --datastore-keyfile go together: give both (the client certificate etcd checks, and its key) or neither")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--datastore-cafile: %w; give the CA certificate that signed etcd's serving certificate", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--datastore-cafile %s holds no PEM certificate; give the CA certificate that signed etcd's serving certificate", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.KeyFile != "" {
		if err := checkKeyMode(f.KeyFile); err != nil {
			return nil, err
		}
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			// The key's contents never appear here: LoadX509KeyPair's
			// errors name the problem, not the bytes.
			return nil, fmt.Errorf("--datastore-certfile %s and --datastore-keyfile %s: %w; give a PEM certificate and the PEM private key that belongs to it", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// checkKeyMode refuses a key other local users could read: whoever holds it
// can read and write every object in etcd.
func checkKeyMode(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--datastore-keyfile: %w; give the private key of the etcd client certificate", err)
	}
	if mode := st.Mode().Perm(); mode&0o077 != 0 {
		return fmt.Errorf("--datastore-keyfile %s has mode %04o, so other local users can read the etcd client key: run chmod 600 %s", path, mode, path)
	}
	return nil
}

// EtcdVersion is what an external etcd reported at Open; "" for kine.
func (d *Datastore) EtcdVersion() string { return d.etcdVersion }

// IsEtcd reports whether endpoint names an external etcd.
func IsEtcd(endpoint string) bool {
	kind, err := backendOf(endpoint)
	return err == nil && kind == "etcd"
}

// EtcdVersionNote is what this etcd's version costs, for the startup log;
// "" when nothing. The apiserver serves consistent lists from its watch
// cache only when etcd answers watch progress requests correctly, which
// etcd has from 3.4.31 and 3.5.13; on an older etcd every such list is read
// from etcd itself.
func EtcdVersionNote(version string) string {
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return ""
	}
	old := major < 3 || (major == 3 && (minor < 4 || (minor == 4 && patch < 31) || (minor == 5 && patch < 13)))
	if !old {
		return ""
	}
	return fmt.Sprintf("etcd %s lacks reliable watch progress requests (etcd 3.4.31+ or 3.5.13+ have them): consistent lists are read from etcd instead of the apiserver's watch cache, which costs etcd more reads; upgrade etcd to spare it", version)
}
