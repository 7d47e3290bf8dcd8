package bootstrap

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/internal/pki"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		DataDir:          filepath.Join(t.TempDir(), "data"),
		AdvertiseAddress: "192.0.2.10",
		BindAddress:      "0.0.0.0",
		HTTPSPort:        9443,
	}
}

func mustEnsure(t *testing.T, cfg Config) *State {
	t.Helper()
	st, err := Ensure(cfg)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return st
}

// snapshot is the content of every file Ensure manages; nil for a missing one.
func snapshot(t *testing.T, f Files) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	for _, p := range []string{f.CACert, f.CAKey, f.ServingCert, f.ServingKey, f.AdminCert, f.AdminKey, f.AdminKubeconfig, f.Token} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		m[p] = b
	}
	return m
}

// changed lists the base names of the files that differ between a and b.
func changed(a, b map[string][]byte) []string {
	var out []string
	for p := range a {
		if !bytes.Equal(a[p], b[p]) {
			out = append(out, filepath.Base(p))
		}
	}
	slices.Sort(out)
	return out
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestEnsureFirstRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.TLSSANs = []string{"muster.example.com", "10.9.8.7"}
	st := mustEnsure(t, cfg)
	f := st.Files

	if !filepath.IsAbs(f.Dir) || f.TLSDir != filepath.Join(f.Dir, "tls") {
		t.Errorf("paths: Dir=%q TLSDir=%q", f.Dir, f.TLSDir)
	}
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{
		{f.Dir, 0o700 | os.ModeDir},
		{f.TLSDir, 0o700 | os.ModeDir},
		{f.CAKey, 0o600},
		{f.ServingKey, 0o600},
		{f.AdminKey, 0o600},
		{f.Token, 0o600},
		{f.AdminKubeconfig, 0o600},
		{f.CACert, 0o644},
		{f.ServingCert, 0o644},
		{f.AdminCert, 0o644},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			info, err := os.Stat(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Mode() & (os.ModeDir | os.ModePerm); got != tc.mode {
				t.Errorf("mode = %v, want %v", got, tc.mode)
			}
		})
	}

	if !strings.HasPrefix(st.CA.Cert.Subject.CommonName, "muster-ca@") {
		t.Errorf("CA CN = %q", st.CA.Cert.Subject.CommonName)
	}
	caFile, _ := os.ReadFile(f.CACert)
	if !bytes.Equal(caFile, st.CA.CertPEM) {
		t.Error("ca.crt differs from State.CA.CertPEM")
	}
	if len(st.Token) != 64 || strings.Trim(st.Token, "0123456789abcdef") != "" {
		t.Errorf("token %q is not 256-bit hex", st.Token)
	}
	tokFile, _ := os.ReadFile(f.Token)
	if strings.TrimSpace(string(tokFile)) != st.Token {
		t.Error("token file differs from State.Token")
	}
	if st.ServerURL != "https://192.0.2.10:9443" || st.AdvertiseAddress != "192.0.2.10" {
		t.Errorf("ServerURL=%q AdvertiseAddress=%q", st.ServerURL, st.AdvertiseAddress)
	}

	// The serving certificate verifies for every name it must carry.
	serving := readCert(t, f.ServingCert)
	names := []string{"localhost", "127.0.0.1", "::1", "192.0.2.10", "muster.example.com", "10.9.8.7"}
	if host, err := os.Hostname(); err == nil && validDNSName(strings.ToLower(host)) {
		names = append(names, host)
	}
	for _, name := range names {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: st.CA.CertPool(), DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", name, err)
		}
	}
	if slices.ContainsFunc(serving.IPAddresses, func(ip net.IP) bool { return ip.IsUnspecified() }) {
		t.Error("serving certificate carries the unspecified bind address")
	}
}

func TestAdminKubeconfigLoadsAndIsAdmin(t *testing.T) {
	cfg := testConfig(t)
	st := mustEnsure(t, cfg)
	raw, err := ReadAdminKubeconfig(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatalf("ClientConfig: %v", err)
	}
	if rc.Host != "https://192.0.2.10:9443" {
		t.Errorf("server = %q", rc.Host)
	}
	if !bytes.Equal(rc.TLSClientConfig.CAData, st.CA.CertPEM) {
		t.Error("kubeconfig CA differs from the CA")
	}
	certs, err := pki.ParseCertsPEM(rc.TLSClientConfig.CertData)
	if err != nil {
		t.Fatal(err)
	}
	cert := certs[0]
	if _, err := cert.Verify(x509.VerifyOptions{Roots: st.CA.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not chain to the CA: %v", err)
	}
	if cert.Subject.CommonName != AdminUser || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject = %v", cert.Subject)
	}
	if _, err := tls.X509KeyPair(rc.TLSClientConfig.CertData, rc.TLSClientConfig.KeyData); err != nil {
		t.Errorf("admin cert and key are not a pair: %v", err)
	}
}

// TestAdminKubeconfigOverTLS serves HTTPS with the serving certificate,
// requiring client certificates from the CA, and calls it with client-go's
// transport built from the admin kubeconfig.
func TestAdminKubeconfigOverTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.AdvertiseAddress = ""
	cfg.BindAddress = "127.0.0.1"
	cfg.HTTPSPort = ln.Addr().(*net.TCPAddr).Port
	st := mustEnsure(t, cfg)

	serving, err := tls.LoadX509KeyPair(st.Files.ServingCert, st.Files.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := r.TLS.PeerCertificates[0]
			fmt.Fprintf(w, "%s/%s", c.Subject.CommonName, strings.Join(c.Subject.Organization, ","))
		}),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{serving},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    st.CA.CertPool(),
		},
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()

	rc, err := clientcmd.RESTConfigFromKubeConfig(mustRead(t, st.Files.AdminKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("https://127.0.0.1:%d", cfg.HTTPSPort); rc.Host != want {
		t.Fatalf("server = %q, want %q", rc.Host, want)
	}
	rt, err := rest.TransportFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Get(rc.Host + "/whoami")
	if err != nil {
		t.Fatalf("request with the admin kubeconfig: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "muster-admin/system:masters" {
		t.Errorf("server saw %q", body)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEnsureRestart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string // files expected to change
	}{
		{"same flags reuse everything", func(*Config) {}, nil},
		{"same SANs in another order and case", func(c *Config) { c.TLSSANs = []string{"10.9.8.7", "Muster.Example.com."} }, nil},
		{"new TLS SAN reissues only the serving cert", func(c *Config) { c.TLSSANs = append(c.TLSSANs, "new.example.com") },
			[]string{"serving.crt", "serving.key"}},
		{"removed TLS SAN reissues only the serving cert", func(c *Config) { c.TLSSANs = c.TLSSANs[:1] },
			[]string{"serving.crt", "serving.key"}},
		{"new port rewrites only the kubeconfig", func(c *Config) { c.HTTPSPort = 6443 },
			[]string{"admin.kubeconfig"}},
		{"new advertise address reissues the serving cert and rewrites the kubeconfig", func(c *Config) { c.AdvertiseAddress = "192.0.2.99" },
			[]string{"admin.kubeconfig", "serving.crt", "serving.key"}},
		{"specific bind address is added to the serving cert", func(c *Config) { c.BindAddress = "127.0.0.2" },
			[]string{"serving.crt", "serving.key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.TLSSANs = []string{"muster.example.com", "10.9.8.7"}
			first := mustEnsure(t, cfg)
			before := snapshot(t, first.Files)

			tc.change(&cfg)
			second := mustEnsure(t, cfg)
			after := snapshot(t, second.Files)

			if got := changed(before, after); !slices.Equal(got, tc.want) {
				t.Errorf("changed files = %v, want %v", got, tc.want)
			}
			if !bytes.Equal(first.CA.CertPEM, second.CA.CertPEM) || first.Token != second.Token {
				t.Error("CA or token changed")
			}
			serving := readCert(t, second.Files.ServingCert)
			for _, name := range append(slices.Clone(cfg.TLSSANs), cfg.AdvertiseAddress) {
				if _, err := serving.Verify(x509.VerifyOptions{Roots: second.CA.CertPool(), DNSName: name}); err != nil {
					t.Errorf("serving certificate does not verify for %s: %v", name, err)
				}
			}
			kc, err := clientcmd.Load(after[second.Files.AdminKubeconfig])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server, second.ServerURL; got != want {
				t.Errorf("kubeconfig server = %q, want %q", got, want)
			}
		})
	}
}

func TestEnsureRenewsExpiringCertificates(t *testing.T) {
	for _, tc := range []struct {
		name string
		// replace overwrites a certificate with one from the same CA expiring soon.
		replace func(t *testing.T, st *State)
		want    []string
	}{
		{"serving cert expiring in 30 days", func(t *testing.T, st *State) {
			cert := readCert(t, st.Files.ServingCert)
			c, k, err := st.CA.IssueServing(ServingCommonName, cert.DNSNames, cert.IPAddresses, 30*24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			writeBoth(t, st.Files.ServingCert, c, st.Files.ServingKey, k)
		}, []string{"serving.crt", "serving.key"}},
		{"admin cert expiring in 30 days", func(t *testing.T, st *State) {
			c, k, err := st.CA.IssueClient(AdminUser, []string{AdminGroup}, 30*24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			writeBoth(t, st.Files.AdminCert, c, st.Files.AdminKey, k)
		}, []string{"admin.crt", "admin.key", "admin.kubeconfig"}},
		{"serving cert from another CA", func(t *testing.T, st *State) {
			other, err := pki.NewCA("other")
			if err != nil {
				t.Fatal(err)
			}
			c, k, err := other.IssueServing(ServingCommonName, []string{"localhost"}, nil, ServingValidity)
			if err != nil {
				t.Fatal(err)
			}
			writeBoth(t, st.Files.ServingCert, c, st.Files.ServingKey, k)
		}, []string{"serving.crt", "serving.key"}},
		{"serving key missing", func(t *testing.T, st *State) {
			if err := os.Remove(st.Files.ServingKey); err != nil {
				t.Fatal(err)
			}
		}, []string{"serving.crt", "serving.key"}},
		{"kubeconfig deleted", func(t *testing.T, st *State) {
			if err := os.Remove(st.Files.AdminKubeconfig); err != nil {
				t.Fatal(err)
			}
		}, []string{"admin.kubeconfig"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			st := mustEnsure(t, cfg)
			tc.replace(t, st)
			before := snapshot(t, st.Files)
			st2 := mustEnsure(t, cfg)
			if got := changed(before, snapshot(t, st2.Files)); !slices.Equal(got, tc.want) {
				t.Errorf("changed files = %v, want %v", got, tc.want)
			}
			for _, p := range []string{st2.Files.ServingCert, st2.Files.AdminCert} {
				if left := time.Until(readCert(t, p).NotAfter); left < RenewBefore {
					t.Errorf("%s still expires in %v", filepath.Base(p), left)
				}
			}
		})
	}
}

func writeBoth(t *testing.T, certPath string, certPEM []byte, keyPath string, keyPEM []byte) {
	t.Helper()
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureRefusesToReplaceDamagedCA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, f Files)
		want   []string // in the error
	}{
		{"CA key missing", func(t *testing.T, f Files) { must(t, os.Remove(f.CAKey)) },
			[]string{"ca.key is missing", "restore", "ca.key from a backup"}},
		{"CA key corrupt", func(t *testing.T, f Files) { must(t, os.WriteFile(f.CAKey, []byte("garbage"), 0o600)) },
			[]string{"loading the CA", "no PEM private key", "restore both from a backup"}},
		{"CA key of another CA", func(t *testing.T, f Files) {
			other, err := pki.NewCA("other")
			must(t, err)
			k, err := other.KeyPEM()
			must(t, err)
			must(t, os.WriteFile(f.CAKey, k, 0o600))
		}, []string{"does not belong to CA certificate"}},
		{"CA cert missing", func(t *testing.T, f Files) { must(t, os.Remove(f.CACert)) },
			[]string{"ca.crt is missing", "restore", "ca.crt from a backup"}},
		{"CA cert corrupt", func(t *testing.T, f Files) { must(t, os.WriteFile(f.CACert, []byte("garbage"), 0o644)) },
			[]string{"CA certificate: no PEM certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			st := mustEnsure(t, cfg)
			tc.damage(t, st.Files)
			before := snapshot(t, st.Files)

			// Flags that would otherwise reissue the serving cert and kubeconfig.
			cfg.TLSSANs = []string{"new.example.com"}
			cfg.HTTPSPort = 6443
			_, err := Ensure(cfg)
			if err == nil {
				t.Fatal("Ensure succeeded with a damaged CA")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "will not replace") && !strings.Contains(err.Error(), "from a backup") {
				t.Errorf("error %q does not tell the operator what to do", err)
			}
			if got := changed(before, snapshot(t, st.Files)); len(got) != 0 {
				t.Errorf("files changed despite the error: %v", got)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureBadInput(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(notADir, nil, 0o600))
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "data dir is empty"},
		{"data dir under a file", func(c *Config) { c.DataDir = filepath.Join(notADir, "data") }, "pass a writable --data-dir"},
		{"data dir is a file", func(c *Config) { c.DataDir = notADir }, "is not a directory"},
		{"bad port", func(c *Config) { c.HTTPSPort = 0 }, "--https-port 0"},
		{"bad TLS SAN", func(c *Config) { c.TLSSANs = []string{"https://muster.example.com"} }, "--tls-san"},
		{"bad advertise address", func(c *Config) { c.AdvertiseAddress = "not an address" }, "--advertise-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.change(&cfg)
			_, err := Ensure(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ensure error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestEnsureReadOnlyDataDir(t *testing.T) {
	cfg := testConfig(t)
	must(t, os.MkdirAll(cfg.DataDir, 0o500))
	if os.Geteuid() == 0 {
		// Root writes through a directory's mode bits (and CI runs as
		// root), so the data dir is a read-only file system instead,
		// as on a host whose disk was remounted read-only.
		if err := syscall.Mount("muster-readonly", cfg.DataDir, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
			t.Fatalf("mounting a read-only tmpfs on %s as root: %v", cfg.DataDir, err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(cfg.DataDir, 0) })
	}
	_, err := Ensure(cfg)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("Ensure error = %v, want one naming --data-dir", err)
	}
}

func TestEnsureTokenFile(t *testing.T) {
	cfg := testConfig(t)
	st := mustEnsure(t, cfg)

	// An operator-provided token is used as is, and made private.
	must(t, os.WriteFile(st.Files.Token, []byte("K10abc::server:0123456789abcdef\n"), 0o644))
	st2 := mustEnsure(t, cfg)
	if st2.Token != "K10abc::server:0123456789abcdef" {
		t.Errorf("token = %q", st2.Token)
	}
	if info, _ := os.Stat(st.Files.Token); info.Mode().Perm() != 0o600 {
		t.Errorf("token mode = %v, want 0600", info.Mode().Perm())
	}

	// An empty token is an error, not silently replaced.
	must(t, os.WriteFile(st.Files.Token, nil, 0o600))
	if _, err := Ensure(cfg); err == nil || !strings.Contains(err.Error(), "restore it") {
		t.Errorf("Ensure with an empty token: %v", err)
	}
}

func TestReadAdminKubeconfigMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadAdminKubeconfig(dir)
	if err == nil || !strings.Contains(err.Error(), "start muster-server once") {
		t.Errorf("error = %v", err)
	}
}

func TestDefaultAdvertiseAddress(t *testing.T) {
	cfg := testConfig(t)
	cfg.AdvertiseAddress = ""
	st := mustEnsure(t, cfg)
	ip := net.ParseIP(st.AdvertiseAddress)
	if ip == nil || ip.To4() == nil {
		t.Fatalf("advertise address %q is not IPv4", st.AdvertiseAddress)
	}
	if st.ServerURL != "https://127.0.0.1:9443" {
		t.Errorf("ServerURL = %q, want the loopback address when none is advertised", st.ServerURL)
	}
	if _, err := readCert(t, st.Files.ServingCert).Verify(x509.VerifyOptions{Roots: st.CA.CertPool(), DNSName: st.AdvertiseAddress}); err != nil {
		t.Errorf("serving cert does not cover the detected address: %v", err)
	}
}
