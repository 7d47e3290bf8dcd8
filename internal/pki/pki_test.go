package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatalf("ParseCertsPEM: %v", err)
	}
	return certs[0]
}

func TestNewCA(t *testing.T) {
	ca := newTestCA(t)
	c := ca.Cert
	if !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a CA: IsCA=%v usage=%v", c.IsCA, c.KeyUsage)
	}
	if c.Subject.CommonName != "test-ca" {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if got := c.NotAfter.Sub(time.Now()); got < CAValidity-time.Minute || got > CAValidity+time.Minute {
		t.Errorf("CA validity left = %v, want about %v", got, CAValidity)
	}
	if k, ok := ca.Key.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.Key)
	}
	if _, err := NewCA(""); err == nil {
		t.Error("NewCA with an empty CN succeeded")
	}
}

func TestCARoundTrip(t *testing.T) {
	ca := newTestCA(t)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !bytes.Equal(loaded.CertPEM, ca.CertPEM) {
		t.Error("CertPEM changed across the round trip")
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Error("certificate changed across the round trip")
	}
	if !publicKeysEqual(loaded.Key.Public(), ca.Key.Public()) {
		t.Error("key changed across the round trip")
	}
	keyPEM2, err := loaded.KeyPEM()
	if err != nil || !bytes.Equal(keyPEM2, keyPEM) {
		t.Errorf("KeyPEM changed across the round trip (err %v)", err)
	}
	// What the loaded CA issues verifies against the original.
	certPEM, _, err := loaded.IssueClient("u", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseCert(t, certPEM).Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate from the loaded CA does not verify: %v", err)
	}
}

func TestLoadCAKeyFormats(t *testing.T) {
	ca := newTestCA(t)
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if _, err := LoadCA(ca.CertPEM, pkcs8); err != nil {
		t.Errorf("LoadCA with a PKCS#8 key: %v", err)
	}
}

func TestLoadCAErrors(t *testing.T) {
	ca := newTestCA(t)
	keyPEM, _ := ca.KeyPEM()
	other := newTestCA(t)
	otherKey, _ := other.KeyPEM()
	leafPEM, leafKey, err := ca.IssueClient("leaf", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"empty cert", nil, keyPEM, "no PEM certificate"},
		{"garbage cert", []byte("not a cert"), keyPEM, "no PEM certificate"},
		{"key PEM as cert", keyPEM, keyPEM, "where a \"CERTIFICATE\" was expected"},
		{"empty key", ca.CertPEM, nil, "no PEM private key"},
		{"cert PEM as key", ca.CertPEM, ca.CertPEM, "is not a private key"},
		{"truncated key", ca.CertPEM, keyPEM[:len(keyPEM)/2], "no PEM private key"},
		{"key of another CA", ca.CertPEM, otherKey, "does not belong"},
		{"leaf is not a CA", leafPEM, leafKey, "is not a CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCA(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadCA error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestIssueServingVerifiesEachSAN(t *testing.T) {
	ca := newTestCA(t)
	dns := []string{"localhost", "muster.example.com", "*.lb.example.com"}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.1.2.3")}
	certPEM, keyPEM, err := ca.IssueServing("muster-server", dns, ips, 24*time.Hour)
	if err != nil {
		t.Fatalf("IssueServing: %v", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("cert and key are not a pair: %v", err)
	}
	cert := parseCert(t, certPEM)
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || cert.IsCA {
		t.Errorf("EKU = %v, IsCA = %v", cert.ExtKeyUsage, cert.IsCA)
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"localhost", true},
		{"muster.example.com", true},
		{"a.lb.example.com", true},
		{"127.0.0.1", true},
		{"::1", true},
		{"10.1.2.3", true},
		{"other.example.com", false},
		{"10.1.2.4", false},
		{"a.b.lb.example.com", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), DNSName: tc.name})
			if (err == nil) != tc.ok {
				t.Errorf("Verify(%s) error = %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
	if _, _, err := ca.IssueServing("x", nil, nil, time.Hour); err == nil {
		t.Error("IssueServing without names succeeded")
	}
}

func TestIssueClient(t *testing.T) {
	ca := newTestCA(t)
	certPEM, keyPEM, err := ca.IssueClient("muster-admin", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("cert and key are not a pair: %v", err)
	}
	cert := parseCert(t, certPEM)
	if cert.Subject.CommonName != "muster-admin" || !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject = %v", cert.Subject)
	}
	for _, tc := range []struct {
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{x509.ExtKeyUsageClientAuth, true},
		{x509.ExtKeyUsageServerAuth, false},
	} {
		_, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{tc.usage}})
		if (err == nil) != tc.ok {
			t.Errorf("Verify for usage %v: err = %v, want ok=%v", tc.usage, err, tc.ok)
		}
	}
	if _, _, err := ca.IssueClient("", nil, time.Hour); err == nil {
		t.Error("IssueClient with an empty CN succeeded")
	}
	if _, _, err := ca.IssueClient("u", nil, 0); err == nil {
		t.Error("IssueClient with zero validity succeeded")
	}
}

func TestIssuedValidityCappedAtCA(t *testing.T) {
	ca := newTestCA(t)
	certPEM, _, err := ca.IssueClient("u", nil, 20*CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	if got := parseCert(t, certPEM).NotAfter; got.After(ca.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %v is after the CA's %v", got, ca.Cert.NotAfter)
	}
}

// csrPEM makes a CSR from tmpl signed by key.
func csrPEM(t *testing.T, tmpl *x509.CertificateRequest, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestSignCSRIgnoresRequestedIdentity(t *testing.T) {
	ca := newTestCA(t)
	key, _, err := NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	ekuServer, _ := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 1}})
	basicCA, _ := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	evil, _ := url.Parse("spiffe://cluster/ns/kube-system/sa/admin")
	for _, tc := range []struct {
		name string
		tmpl *x509.CertificateRequest
	}{
		{"asks for admin", &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "muster-admin", Organization: []string{"system:masters"}},
		}},
		{"asks for SANs", &x509.CertificateRequest{
			Subject:        pkix.Name{CommonName: "node-1"},
			DNSNames:       []string{"muster.example.com", "kubernetes.default"},
			IPAddresses:    []net.IP{net.ParseIP("10.0.0.1")},
			EmailAddresses: []string{"root@example.com"},
			URIs:           []*url.URL{evil},
		}},
		{"asks for server auth and CA", &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "node-1"},
			ExtraExtensions: []pkix.Extension{
				{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Value: ekuServer},
				{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: basicCA},
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := ParseCSR(csrPEM(t, tc.tmpl, key))
			if err != nil {
				t.Fatalf("ParseCSR: %v", err)
			}
			certPEM, err := ca.SignCSR(csr, "machine:node-1", []string{"muster:agents"}, time.Hour)
			if err != nil {
				t.Fatalf("SignCSR: %v", err)
			}
			cert := parseCert(t, certPEM)
			if cert.Subject.CommonName != "machine:node-1" || !slices.Equal(cert.Subject.Organization, []string{"muster:agents"}) {
				t.Errorf("subject = %v, want CN=machine:node-1 O=muster:agents", cert.Subject)
			}
			if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses)+len(cert.URIs) != 0 {
				t.Errorf("certificate carries requested SANs: %v %v %v %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses, cert.URIs)
			}
			if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
				t.Errorf("EKU = %v %v, want client auth only", cert.ExtKeyUsage, cert.UnknownExtKeyUsage)
			}
			if cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign != 0 {
				t.Error("certificate is a CA")
			}
			if !publicKeysEqual(cert.PublicKey, key.Public()) {
				t.Error("certificate is not for the CSR's key")
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
				t.Error("certificate verifies for server auth")
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("certificate does not verify for client auth: %v", err)
			}
		})
	}
}

// tamper returns der's CSR with its signature broken in the given way.
func tamperCSR(t *testing.T, how string) []byte {
	t.Helper()
	key, _, err := NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "agent-a"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	der = bytes.Clone(der)
	switch how {
	case "subject":
		i := bytes.Index(der, []byte("agent-a"))
		der[i+6] = 'b'
	case "signature":
		der[len(der)-1] ^= 0x01
	}
	return der
}

func TestBadSignatureRefused(t *testing.T) {
	ca := newTestCA(t)
	for _, how := range []string{"subject", "signature"} {
		t.Run(how, func(t *testing.T) {
			der := tamperCSR(t, how)
			if _, err := ParseCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})); err == nil || !strings.Contains(err.Error(), "signature is invalid") {
				t.Errorf("ParseCSR error = %v, want an invalid-signature error", err)
			}
			csr, err := x509.ParseCertificateRequest(der)
			if err != nil {
				t.Fatalf("tampered CSR no longer parses: %v", err)
			}
			if _, err := ca.SignCSR(csr, "u", nil, time.Hour); err == nil || !strings.Contains(err.Error(), "signature is invalid") {
				t.Errorf("SignCSR error = %v, want an invalid-signature error", err)
			}
		})
	}
}

func TestSignCSRKeyStrength(t *testing.T) {
	ca := newTestCA(t)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		want string // "" means accepted
	}{
		{"RSA-1024", rsa1024, "RSA key of 1024 bits is too weak"},
		{"RSA-2048", rsa2048, ""},
		{"ECDSA P-384", p384, ""},
		{"Ed25519", ed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := ParseCSR(csrPEM(t, &x509.CertificateRequest{}, tc.key))
			if err != nil {
				t.Fatalf("ParseCSR: %v", err)
			}
			_, err = ca.SignCSR(csr, "u", nil, time.Hour)
			if tc.want == "" && err != nil {
				t.Errorf("SignCSR: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("SignCSR error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := CheckPublicKey(&ecdsa.PublicKey{Curve: elliptic.P224()}); err == nil {
		t.Error("CheckPublicKey accepted P-224")
	}
}

func TestParseCSRErrors(t *testing.T) {
	key, _, _ := NewPrivateKey()
	good := csrPEM(t, &x509.CertificateRequest{}, key)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "is empty"},
		{"too large", append(bytes.Repeat([]byte(" "), MaxCSRBytes), good...), "more than the"},
		{"not PEM", []byte("hello"), "is not PEM"},
		{"wrong type", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "PEM type \"CERTIFICATE\""},
		{"two CSRs", append(slices.Clone(good), good...), "data after its PEM block"},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x01, 0x00}}), "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCSR(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseCSR error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseCSR(good); err != nil {
		t.Errorf("ParseCSR(good): %v", err)
	}
}

func TestHash(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	h := Hash(ca.CertPEM)
	if h != Hash(bytes.Clone(ca.CertPEM)) {
		t.Error("Hash is not stable")
	}
	if h == Hash(other.CertPEM) {
		t.Error("two CAs hash the same")
	}
	sum := sha256.Sum256(ca.CertPEM)
	if h != hex.EncodeToString(sum[:]) || len(h) != 64 {
		t.Errorf("Hash = %q, want hex sha256", h)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed")
	}
	out, err := exec.Command("sha256sum", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out))[0]; got != h {
		t.Errorf("sha256sum = %s, Hash = %s", got, h)
	}
}
