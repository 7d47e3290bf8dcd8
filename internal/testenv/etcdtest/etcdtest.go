// Package etcdtest gives tests a real etcd (Debian's etcd-server, or the
// binary $MUSTER_TEST_ETCD names) on free loopback ports, serving TLS with
// a throwaway CA and requiring client certificates (--client-cert-auth), as
// an operator's etcd would. Each Start is a fresh etcd, stopped when the
// test ends. Without an etcd binary, tests fail under CI (a skipped backend
// must never pass as tested) and skip elsewhere with the reason.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/proc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is a running etcd and the files a client reaches it with.
type Etcd struct {
	// Endpoint is https://127.0.0.1:PORT.
	Endpoint string
	// CAFile signed etcd's serving certificate and the client certificate;
	// CertFile and KeyFile (mode 0600) are a client certificate etcd accepts.
	CAFile, CertFile, KeyFile string
	// Dir holds the files above, etcd's data and its log (etcd.log).
	Dir string

	proc *proc.Proc
}

// Binary is the etcd to run: $MUSTER_TEST_ETCD, else etcd on PATH, else
// Debian's /usr/bin/etcd.
func Binary() (string, error) {
	if b := os.Getenv("MUSTER_TEST_ETCD"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("etcd"); err == nil {
		return b, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", fmt.Errorf("no etcd binary: apt-get install etcd-server, or set MUSTER_TEST_ETCD")
}

// Start runs a fresh etcd for this test.
func Start(t testing.TB) *Etcd {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("etcd is required under CI: %v", err)
		}
		t.Skipf("no etcd for this test: %v", err)
	}
	dir, err := os.MkdirTemp("", "muster-etcdtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ca := newCA(t, "muster-etcdtest CA")
	e := &Etcd{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key")}
	writeFile(t, e.CAFile, ca.certPEM, 0o644)
	serverCert, serverKey := ca.issue(t, "etcd", true)
	writeFile(t, filepath.Join(dir, "server.crt"), serverCert, 0o644)
	writeFile(t, filepath.Join(dir, "server.key"), serverKey, 0o600)
	clientCert, clientKey := ca.issue(t, "muster-server", false)
	writeFile(t, e.CertFile, clientCert, 0o644)
	writeFile(t, e.KeyFile, clientKey, 0o600)

	clientPort, peerPort := freePort(t), freePort(t)
	e.Endpoint = fmt.Sprintf("https://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cmd := exec.Command(bin,
		"--name", "default",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", e.Endpoint,
		"--advertise-client-urls", e.Endpoint,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--cert-file", filepath.Join(dir, "server.crt"),
		"--key-file", filepath.Join(dir, "server.key"),
		"--trusted-ca-file", e.CAFile,
		"--client-cert-auth",
		"--logger", "zap", "--log-outputs", "stderr",
	)
	e.proc = proc.Start(t, cmd, filepath.Join(dir, "etcd.log"))
	if err := e.waitReady(30 * time.Second); err != nil {
		t.Fatalf("etcd at %s did not become ready: %v\n%s", e.Endpoint, err, e.Log())
	}
	return e
}

// Stop ends etcd and waits for it.
func (e *Etcd) Stop() { e.proc.Stop() }

// Log is what etcd wrote so far, for failure messages.
func (e *Etcd) Log() string { return e.proc.Log() }

// Client is an etcd client with the accepted client certificate.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg, err := e.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ForeignClientCert writes a client certificate and key (mode 0600) signed
// by a CA etcd does not trust, for tests of a refused certificate.
func (e *Etcd) ForeignClientCert(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	other := newCA(t, "not etcd's CA")
	cert, key := other.issue(t, "intruder", false)
	certFile, keyFile = filepath.Join(e.Dir, "foreign.crt"), filepath.Join(e.Dir, "foreign.key")
	writeFile(t, certFile, cert, 0o644)
	writeFile(t, keyFile, key, 0o600)
	return certFile, keyFile
}

func (e *Etcd) tlsConfig() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// waitReady polls etcd's Status until it answers, or etcd exits.
func (e *Etcd) waitReady(within time.Duration) error {
	cfg, err := e.tlsConfig()
	if err != nil {
		return err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, TLS: cfg})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Status(ctx, e.Endpoint)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-e.proc.Done():
			return errors.New("etcd exited (its log says why)")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a serving certificate for 127.0.0.1 and localhost, or a
// client certificate.
func (ca *testCA) issue(t testing.TB, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		// etcd's client listener also dials itself as a client (its
		// grpc-gateway), so its certificate serves both ways.
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFile(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// freePort is a loopback port nothing listens on now; etcd binds it next.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
