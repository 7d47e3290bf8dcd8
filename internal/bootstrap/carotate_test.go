package bootstrap

import (
	"bytes"
	"crypto/x509"
	"os"
	"strings"
	"testing"

	"github.com/muster-io/muster/internal/pki"
)

// A data dir through a CA rotation: staged, the new CA signs the admin
// certificate while the serving certificate stays the old CA's (agents
// holding only the old CA must still verify the server) and the bundle
// holds both; retired, the serving certificate is re-issued under the new
// CA, the old CA's files are gone and the bundle is ca.crt byte for byte.
func TestCARotationDataDir(t *testing.T) {
	cfg := testConfig(t)
	first := mustEnsure(t, cfg)
	oldKey, _ := first.CA.KeyPEM()
	if b, _ := os.ReadFile(first.Files.CABundle); !bytes.Equal(b, first.CA.CertPEM) {
		t.Fatal("without a rotation the bundle is not ca.crt byte for byte (join tokens pin its hash)")
	}
	next, err := pki.NewCA("muster-ca@next")
	if err != nil {
		t.Fatal(err)
	}
	nextKey, _ := next.KeyPEM()
	staged := &SharedCA{CertPEM: next.CertPEM, KeyPEM: nextKey, Retiring: &RetiringCA{CertPEM: first.CA.CertPEM, KeyPEM: oldKey}}

	// The record survives a token rotation whole, retiring CA included.
	blob, err := SealShared(first.Token, staged)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("e", 64)
	resealed, err := Reseal(first.Token, other, blob)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := OpenCA(other, resealed)
	if err != nil || opened.Retiring == nil || !bytes.Equal(opened.Retiring.CertPEM, first.CA.CertPEM) {
		t.Fatalf("a token rotation dropped the retiring CA: %v", err)
	}

	if err := InstallCA(cfg.DataDir, staged, false); err != nil {
		t.Fatalf("InstallCA of a rotation over the CA it retires: %v", err)
	}
	during := mustEnsure(t, cfg)
	if !bytes.Equal(during.CA.CertPEM, next.CertPEM) || during.Retiring == nil {
		t.Fatal("during the rotation the signer is not the new CA, or the old one is not kept")
	}
	verify(t, during.Files.ServingCert, first.CA, x509.ExtKeyUsageServerAuth)
	verify(t, during.Files.AdminCert, next, x509.ExtKeyUsageClientAuth)
	bundle, _ := os.ReadFile(during.Files.CABundle)
	if !bytes.Contains(bundle, first.CA.CertPEM) || !bytes.Contains(bundle, next.CertPEM) || !bytes.Equal(bundle, during.BundlePEM) {
		t.Fatal("the bundle does not hold both CAs during the rotation")
	}

	retired := &SharedCA{CertPEM: next.CertPEM, KeyPEM: nextKey}
	if err := InstallCA(cfg.DataDir, retired, false); err != nil {
		t.Fatalf("InstallCA after retirement: %v", err)
	}
	after := mustEnsure(t, cfg)
	if after.Retiring != nil {
		t.Fatal("the retired CA is still loaded")
	}
	for _, f := range []string{after.Files.RetiringCACert, after.Files.RetiringCAKey} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s still exists after retirement: %v", f, err)
		}
	}
	verify(t, after.Files.ServingCert, next, x509.ExtKeyUsageServerAuth)
	if b, _ := os.ReadFile(after.Files.CABundle); !bytes.Equal(b, next.CertPEM) {
		t.Fatal("after retirement the bundle is not the new CA alone")
	}
}

func verify(t *testing.T, path string, ca *pki.CA, usage x509.ExtKeyUsage) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(b)
	if err != nil || len(certs) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Errorf("%s does not verify against %s: %v", path, ca.Cert.Subject.CommonName, err)
	}
}
