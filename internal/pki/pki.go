// Package pki holds Muster's certificate helpers: a CA that issues serving and
// client certificates and signs agents' CSRs, PEM encoding and parsing, the
// CA hash that join tokens pin, and atomic writes of key material.
//
// Keys are ECDSA P-256. Everything is standard-library crypto/x509; there are
// no hidden defaults beyond those documented on each function.
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
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	// CAValidity is how long a CA made by NewCA is valid.
	CAValidity = 10 * 365 * 24 * time.Hour

	// MaxCSRBytes is the largest PEM CSR Muster accepts anywhere: in a
	// registration (its validation) and in ParseCSR. A P-256 CSR is well
	// under 1 KiB and an RSA-4096 one under 4 KiB.
	MaxCSRBytes = 8 << 10

	// MinRSABits is the smallest RSA key SignCSR accepts.
	MinRSABits = 2048

	// leafBackdate tolerates clock skew between the server and its clients.
	leafBackdate = 5 * time.Minute
	// caBackdate does the same for the CA, generously.
	caBackdate = time.Hour

	pemTypeCertificate = "CERTIFICATE"
	pemTypeECKey       = "EC PRIVATE KEY"
	pemTypePKCS8Key    = "PRIVATE KEY"
	pemTypeRSAKey      = "RSA PRIVATE KEY"
	pemTypeCSR         = "CERTIFICATE REQUEST"
	pemTypeNewCSR      = "NEW CERTIFICATE REQUEST"
)

// CA is a certificate authority: its certificate, its key, and the PEM bytes
// of its certificate exactly as served on /cacerts and pinned by join tokens.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA makes a self-signed CA with a fresh ECDSA P-256 key, valid for
// CAValidity.
func NewCA(commonName string) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("CA common name is empty")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-caBackdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing new CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der)}, nil
}

// LoadCA loads a CA from PEM. certPEM may be a bundle: its first certificate
// is the signing CA and must match keyPEM; the whole bundle is kept, byte for
// byte, as CertPEM. keyPEM may be SEC1 (EC), PKCS#1 (RSA) or PKCS#8.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert := certs[0]
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %q is not a CA (basic constraints CA=%v, cert-sign usage=%v)",
			cert.Subject.CommonName, cert.IsCA, cert.KeyUsage&x509.KeyUsageCertSign != 0)
	}
	key, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("CA key does not belong to CA certificate %q", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key, CertPEM: bytes.Clone(certPEM)}, nil
}

// KeyPEM encodes the CA key: SEC1 for ECDSA, PKCS#1 for RSA, PKCS#8 otherwise.
func (ca *CA) KeyPEM() ([]byte, error) {
	return MarshalPrivateKeyPEM(ca.Key)
}

// CertPool is a pool holding the CA certificate, for verifying certificates
// it issued and for TLS configs.
func (ca *CA) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// IssueServing issues a server-auth certificate for the given DNS names and
// IPs with a fresh ECDSA P-256 key.
func (ca *CA) IssueServing(cn string, dnsNames []string, ips []net.IP, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, errors.New("serving certificate needs at least one DNS name or IP")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    append([]string(nil), dnsNames...),
		IPAddresses: append([]net.IP(nil), ips...),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return ca.issueWithNewKey(tmpl, validity)
}

// IssuePeer issues a certificate for both server and client auth, for the
// given DNS names and IPs, with a fresh ECDSA P-256 key: what an etcd
// member presents both to its clients and to (and as a client of) its peers.
func (ca *CA) IssuePeer(cn string, dnsNames []string, ips []net.IP, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, errors.New("peer certificate needs at least one DNS name or IP")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    append([]string(nil), dnsNames...),
		IPAddresses: append([]net.IP(nil), ips...),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	return ca.issueWithNewKey(tmpl, validity)
}

// IssueClient issues a client-auth certificate with a fresh ECDSA P-256 key
// for user cn in groups (the Organization, as Kubernetes reads it).
func (ca *CA) IssueClient(cn string, groups []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	tmpl, err := clientTemplate(cn, groups)
	if err != nil {
		return nil, nil, err
	}
	return ca.issueWithNewKey(tmpl, validity)
}

// SignCSR signs csr's public key into a client-auth certificate for user cn
// in groups. Only the public key is taken from csr: its subject, SANs and
// extensions are ignored, because the server, not the requester, decides the
// identity. The CSR's self-signature is checked and weak keys are refused.
func (ca *CA) SignCSR(csr *x509.CertificateRequest, cn string, groups []string, validity time.Duration) (certPEM []byte, err error) {
	if csr == nil {
		return nil, errors.New("no certificate signing request")
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate signing request signature is invalid (was it signed by the key it carries?): %w", err)
	}
	if err := CheckPublicKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("certificate signing request: %w", err)
	}
	tmpl, err := clientTemplate(cn, groups)
	if err != nil {
		return nil, err
	}
	der, err := ca.sign(tmpl, csr.PublicKey, validity)
	if err != nil {
		return nil, err
	}
	return encodeCert(der), nil
}

// CheckPublicKey accepts ECDSA P-256/P-384/P-521, Ed25519 and RSA of at
// least MinRSABits; anything else gets an error saying what to use instead.
func CheckPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits {
			return fmt.Errorf("RSA key of %d bits is too weak: use RSA of at least %d bits or ECDSA P-256", bits, MinRSABits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return fmt.Errorf("ECDSA curve %s is not accepted: use P-256, P-384 or P-521", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("public key type %T is not accepted: use ECDSA P-256", pub)
	}
	return nil
}

// ParseCSR parses one PEM "CERTIFICATE REQUEST" of at most MaxCSRBytes and
// checks its self-signature.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	csr, err := DecodeCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate signing request signature is invalid (was it signed by the key it carries?): %w", err)
	}
	return csr, nil
}

// DecodeCSR parses one PEM "CERTIFICATE REQUEST" of at most MaxCSRBytes
// without checking its self-signature: for a CSR about to be given to
// SignCSR, which checks it.
func DecodeCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	if len(csrPEM) == 0 {
		return nil, errors.New("certificate signing request is empty")
	}
	if len(csrPEM) > MaxCSRBytes {
		return nil, fmt.Errorf("certificate signing request is %d bytes, more than the %d allowed", len(csrPEM), MaxCSRBytes)
	}
	block, rest := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New(`certificate signing request is not PEM: expected "-----BEGIN CERTIFICATE REQUEST-----"`)
	}
	if block.Type != pemTypeCSR && block.Type != pemTypeNewCSR {
		return nil, fmt.Errorf("certificate signing request has PEM type %q, want %q", block.Type, pemTypeCSR)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("certificate signing request has data after its PEM block: send exactly one CSR")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate signing request is malformed: %w", err)
	}
	return csr, nil
}

// NewCSR makes a PEM CSR for key with subject CN cn. Muster's server ignores
// the subject (see SignCSR); it is there for humans reading the request.
func NewCSR(cn string, key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("creating certificate signing request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeCSR, Bytes: der}), nil
}

// NewPrivateKey makes an ECDSA P-256 key and its SEC1 PEM encoding.
func NewPrivateKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	keyPEM, err := MarshalPrivateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// Hash is the hex SHA-256 of the CA bundle bytes exactly as served on
// /cacerts: the <hash> in a "K10<hash>::<id>.<secret>" join token. It equals
// `sha256sum ca.crt`.
func Hash(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// ParseCertsPEM parses every block of certsPEM; each must be a CERTIFICATE
// and there must be at least one.
func ParseCertsPEM(certsPEM []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := certsPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemTypeCertificate {
			return nil, fmt.Errorf("found PEM block %q where a %q was expected", block.Type, pemTypeCertificate)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d is malformed: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("data after the last PEM certificate is not PEM")
	}
	return certs, nil
}

// ParsePrivateKeyPEM parses one PEM private key: SEC1 "EC PRIVATE KEY",
// PKCS#1 "RSA PRIVATE KEY" or PKCS#8 "PRIVATE KEY".
func ParsePrivateKeyPEM(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key found")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case pemTypeECKey:
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case pemTypeRSAKey:
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case pemTypePKCS8Key:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key (want %q, %q or %q)", block.Type, pemTypeECKey, pemTypePKCS8Key, pemTypeRSAKey)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is malformed: %w", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	return signer, nil
}

// MarshalPrivateKeyPEM encodes key: SEC1 for ECDSA, PKCS#1 for RSA, PKCS#8
// otherwise.
func MarshalPrivateKeyPEM(key crypto.Signer) ([]byte, error) {
	var (
		block *pem.Block
		der   []byte
		err   error
	)
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err = x509.MarshalECPrivateKey(k)
		block = &pem.Block{Type: pemTypeECKey}
	case *rsa.PrivateKey:
		der = x509.MarshalPKCS1PrivateKey(k)
		block = &pem.Block{Type: pemTypeRSAKey}
	default:
		der, err = x509.MarshalPKCS8PrivateKey(key)
		block = &pem.Block{Type: pemTypePKCS8Key}
	}
	if err != nil {
		return nil, fmt.Errorf("encoding %T private key: %w", key, err)
	}
	block.Bytes = der
	return pem.EncodeToMemory(block), nil
}

func clientTemplate(cn string, groups []string) (*x509.Certificate, error) {
	if cn == "" {
		return nil, errors.New("client certificate common name (user name) is empty")
	}
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: append([]string(nil), groups...)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, nil
}

func (ca *CA) issueWithNewKey(tmpl *x509.Certificate, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := NewPrivateKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := ca.sign(tmpl, key.Public(), validity)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// sign fills in serial, validity (capped at the CA's own expiry) and key
// usage, and signs tmpl for pub.
// IssuedAt is when the CA issued a leaf certificate it signed: its
// NotBefore is backdated by leafBackdate.
func IssuedAt(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(leafBackdate) }

func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey, validity time.Duration) ([]byte, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate validity %v is not positive", validity)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-leafBackdate)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("CA %q expired at %s", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if _, isRSA := pub.(*rsa.PublicKey); isRSA {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = false
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating certificate serial number: %w", err)
	}
	// Never zero: RFC 5280 wants a positive serial.
	return serial.Add(serial, big.NewInt(1)), nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Bytes: der})
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
