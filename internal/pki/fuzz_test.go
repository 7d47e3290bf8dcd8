package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"slices"
	"testing"
	"time"
)

// FuzzCSR: the CSR checks a registration runs (DecodeCSR, ParseCSR,
// CheckPublicKey, then SignCSR) never panic on any input; what they accept
// is one bounded PEM CSR with a valid self-signature and an accepted key,
// and the certificate signed for it is the server's narrow client
// certificate for that key, whatever the CSR asked for.
func FuzzCSR(f *testing.F) {
	csr := func(key crypto.Signer, tmpl *x509.CertificateRequest, pemType string) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			f.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	plain := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}}
	greedy := &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "muster-admin", Organization: []string{"system:masters"}},
		DNSNames:    []string{"muster.example.com"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.1")},
	}
	agent, err := NewCSR("node-a", p256)
	if err != nil {
		f.Fatal(err)
	}
	forged := bytes.Clone(agent)
	block, _ := pem.Decode(forged)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	forged = pem.EncodeToMemory(block)
	for _, seed := range [][]byte{
		agent,
		csr(p384, plain, pemTypeCSR),
		csr(ed, plain, pemTypeCSR),
		csr(rsa2048, plain, pemTypeCSR),
		csr(rsa1024, plain, pemTypeCSR),
		csr(p224, plain, pemTypeCSR),
		csr(p256, greedy, pemTypeCSR),
		csr(p256, plain, pemTypeNewCSR),
		csr(p256, plain, "CERTIFICATE"),
		append(bytes.Clone(agent), agent...),
		forged,
		[]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"),
		[]byte("not a csr"),
		nil,
	} {
		f.Add(seed)
	}
	ca, err := NewCA("fuzz-ca")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		decoded, decodeErr := DecodeCSR(in)
		parsed, parseErr := ParseCSR(in)
		if parseErr == nil && decodeErr != nil {
			t.Fatalf("ParseCSR accepted what DecodeCSR refused: %v", decodeErr)
		}
		if decodeErr != nil {
			return
		}
		if len(in) > MaxCSRBytes {
			t.Fatalf("accepted a CSR of %d bytes, over MaxCSRBytes", len(in))
		}
		// One PEM block, and nothing but space after it.
		block, rest := pem.Decode(in)
		if block == nil || len(bytes.TrimSpace(rest)) != 0 || !bytes.Equal(block.Bytes, decoded.Raw) {
			t.Fatalf("accepted input is not exactly one PEM CSR")
		}
		// The CSR round-trips through its DER.
		again, err := x509.ParseCertificateRequest(decoded.Raw)
		if err != nil || !bytes.Equal(again.Raw, decoded.Raw) {
			t.Fatalf("the accepted CSR does not parse again from its own DER: %v", err)
		}
		if parseErr != nil {
			if decoded.CheckSignature() == nil {
				t.Fatalf("ParseCSR refused a CSR whose signature checks: %v", parseErr)
			}
			return
		}
		if !bytes.Equal(parsed.Raw, decoded.Raw) {
			t.Fatalf("ParseCSR and DecodeCSR read different CSRs")
		}
		keyErr := CheckPublicKey(parsed.PublicKey)
		certPEM, signErr := ca.SignCSR(parsed, "machine:node-a", []string{"muster:machines"}, time.Hour)
		if (keyErr == nil) != (signErr == nil) {
			t.Fatalf("CheckPublicKey (%v) and SignCSR (%v) disagree", keyErr, signErr)
		}
		if signErr != nil {
			return
		}
		switch k := parsed.PublicKey.(type) {
		case *rsa.PublicKey:
			if k.N.BitLen() < MinRSABits {
				t.Fatalf("accepted RSA-%d", k.N.BitLen())
			}
		case *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			t.Fatalf("accepted a %T key", k)
		}
		certs, err := ParseCertsPEM(certPEM)
		if err != nil || len(certs) != 1 {
			t.Fatalf("SignCSR's certificate does not parse: %v", err)
		}
		c := certs[0]
		if c.IsCA || len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses)+len(c.URIs) > 0 ||
			!slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) ||
			c.Subject.CommonName != "machine:node-a" || !slices.Equal(c.Subject.Organization, []string{"muster:machines"}) {
			t.Fatalf("the certificate is not the server's narrow client certificate: CA=%v SANs=%v %v usages=%v subject=%v",
				c.IsCA, c.DNSNames, c.IPAddresses, c.ExtKeyUsage, c.Subject)
		}
		if !publicKeysEqual(c.PublicKey, parsed.PublicKey) {
			t.Fatalf("the certificate carries another key than the CSR's")
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("the certificate does not verify against the CA: %v", err)
		}
	})
}
