// Package bootstrap prepares muster-server's data dir: on first start it
// generates the CA, the serving certificate, the server token, the admin
// client certificate and the admin kubeconfig; on later starts it reuses
// them, re-issuing only what is missing, expiring, or no longer matches the
// flags. It never replaces an existing CA.
//
// Layout under the data dir (dirs 0700, secrets 0600, certificates 0644):
//
//	<data-dir>/                  0700
//	<data-dir>/token             0600 server token
//	<data-dir>/admin.kubeconfig  0600 kubeconfig for user muster-admin (group system:masters)
//	<data-dir>/tls/              0700
//	<data-dir>/tls/ca.crt        0644 CA certificate, served on /cacerts
//	<data-dir>/tls/ca.key        0600
//	<data-dir>/tls/serving.crt   0644 HTTPS serving certificate
//	<data-dir>/tls/serving.key   0600
//	<data-dir>/tls/admin.crt     0644 admin client certificate
//	<data-dir>/tls/admin.key     0600
package bootstrap

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/datadir"

	"github.com/muster-io/muster/internal/atomicfile"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/pki"
)

const (
	// ServingValidity is how long a serving certificate is issued for.
	ServingValidity = 365 * 24 * time.Hour
	// AdminValidity is how long the admin client certificate is issued for.
	AdminValidity = 365 * 24 * time.Hour
	// RenewBefore is how long before expiry a certificate is re-issued at start.
	RenewBefore = 90 * 24 * time.Hour

	// AdminUser and AdminGroup are the admin kubeconfig's identity.
	AdminUser  = "muster-admin"
	AdminGroup = "system:masters"

	// ServingCommonName is the serving certificate's subject CN.
	ServingCommonName = "muster-server"

	// kubeconfigName names the cluster, user and context in the admin kubeconfig.
	kubeconfigName = "muster"

	// tokenBytes is the server token's entropy: 256 bits, hex-encoded.
	tokenBytes = 32
	// minTokenLen refuses a token file that was truncated or hand-written too short.
	minTokenLen = 16

	dirMode    os.FileMode = 0o700
	secretMode os.FileMode = 0o600
	certMode   os.FileMode = 0o644
)

// Config is what Ensure needs from muster-server's flags.
type Config struct {
	DataDir string
	// AdvertiseAddress may be empty: then the first non-loopback IPv4, else 127.0.0.1.
	AdvertiseAddress string
	BindAddress      string
	HTTPSPort        int
	// TLSSANs are extra DNS names or IPs for the serving certificate.
	TLSSANs []string
	// Token is the server token from --token; empty to use the data dir's,
	// or to generate one on first start.
	Token string
}

// Files are the absolute paths of everything Ensure keeps in the data dir:
// the data dir's one layout.
type Files = datadir.Layout

// State is the data dir after Ensure: paths, the loaded CA, and the token.
type State struct {
	Files Files
	// CA signs every certificate the server issues (the new CA during a
	// rotation).
	CA *pki.CA
	// Retiring is the CA a rotation replaces, nil when none is under way:
	// it still signs the serving certificate, which agents holding only
	// it must verify until they have fetched the bundle.
	Retiring *pki.CA
	// BundlePEM is every CA the server trusts, what /cacerts serves: CA's
	// certificate alone (byte for byte ca.crt) when no rotation is under way.
	BundlePEM []byte
	// Token is the server token (hex, 256 bits), stored 0600 in Files.Token.
	Token string
	// AdvertiseAddress is Config.AdvertiseAddress, or the one detected when it was empty.
	AdvertiseAddress string
	// ServerURL is the URL written into the admin kubeconfig.
	ServerURL string
	// GeneratedCA is set when this Ensure generated the CA (the data dir had none).
	GeneratedCA bool
}

// Ensure makes the data dir ready: it creates what is missing and reuses
// what exists. The CA is never replaced: if its certificate or key is
// missing or corrupt while the other exists, Ensure fails and says what to
// restore. The serving certificate is re-issued from the same CA when the
// names it must carry changed or it expires within RenewBefore; the admin
// certificate when it expires within RenewBefore; the kubeconfig when its
// server URL or credentials changed.
func Ensure(cfg Config) (*State, error) {
	files, err := datadir.New(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.HTTPSPort <= 0 || cfg.HTTPSPort > 65535 {
		return nil, fmt.Errorf("--https-port %d is not a TCP port (1-65535)", cfg.HTTPSPort)
	}
	// "[2001:db8::1]", as in a URL, is the address 2001:db8::1: bracketed
	// again by net.JoinHostPort it would make an endpoint no agent can dial.
	cfg.AdvertiseAddress = unbracket(cfg.AdvertiseAddress)
	advertise := cfg.AdvertiseAddress
	if advertise == "" {
		advertise = defaultAdvertiseAddress()
	}
	sans, err := requiredSANs(cfg, advertise)
	if err != nil {
		return nil, err
	}

	if err := prepareDirs(files); err != nil {
		return nil, err
	}
	// The CA comes first: if it is damaged nothing else may be written.
	ca, generated, err := ensureCA(files)
	if err != nil {
		return nil, err
	}
	retiring, err := loadRetiring(files)
	if err != nil {
		return nil, err
	}
	bundle := ca.CertPEM
	servingCA := ca
	if retiring != nil {
		bundle = append(append(slices.Clone(ca.CertPEM), '\n'), retiring.CertPEM...)
		servingCA = retiring
	}
	if err := atomicfile.Write(files.CABundle, bundle, certMode); err != nil {
		return nil, err
	}
	token, err := ensureToken(files, cfg.Token)
	if err != nil {
		return nil, err
	}
	if err := ensureServing(files, servingCA, sans); err != nil {
		return nil, err
	}
	if err := ensureAdmin(files, ca); err != nil {
		return nil, err
	}
	state := &State{
		Files:            files,
		CA:               ca,
		Retiring:         retiring,
		BundlePEM:        bundle,
		Token:            token,
		AdvertiseAddress: advertise,
		ServerURL:        serverURL(cfg),
		GeneratedCA:      generated,
	}
	if err := ensureKubeconfig(state); err != nil {
		return nil, err
	}
	return state, nil
}

// AdminKubeconfig is a kubeconfig for the admin user that trusts the CA and
// points at serverURL, with the CA and the admin client certificate and key
// embedded.
func AdminKubeconfig(state *State, serverURL string) ([]byte, error) {
	if serverURL == "" {
		return nil, errors.New("admin kubeconfig: server URL is empty")
	}
	certPEM, err := os.ReadFile(state.Files.AdminCert)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: reading the admin certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(state.Files.AdminKey)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: reading the admin key: %w", err)
	}
	return kubeconfigFor(state.BundlePEM, serverURL, certPEM, keyPEM)
}

// loadRetiring loads the CA a rotation is retiring, nil if none is.
func loadRetiring(files Files) (*pki.CA, error) {
	certPEM, err := readOptional(files.RetiringCACert)
	if err != nil || certPEM == nil {
		return nil, err
	}
	keyPEM, err := readOptional(files.RetiringCAKey)
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the retiring CA from %s and %s: %w: restart the server to fetch them again from the datastore, or run 'muster-server certificate rotate-ca --retire'",
			files.RetiringCACert, files.RetiringCAKey, err)
	}
	return ca, nil
}

func kubeconfigFor(caPEM []byte, serverURL string, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigName] = &clientcmdapi.Cluster{
		Server:                   serverURL,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts[kubeconfigName] = &clientcmdapi.Context{
		Cluster:  kubeconfigName,
		AuthInfo: kubeconfigName,
	}
	cfg.CurrentContext = kubeconfigName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: encoding: %w", err)
	}
	return out, nil
}

// UserKubeconfig mints a client certificate for a person or tool (name,
// groups) from the data dir's CA and returns a kubeconfig that points where
// the admin kubeconfig points. Only who can read the CA key — the server's
// host — can mint one, as with k3s. A minted certificate cannot be revoked
// before it expires: keep validity short for people who may leave.
func UserKubeconfig(dataDir, name string, groups []string, validity time.Duration) ([]byte, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("validity %s: give how long the certificate may be used, such as 720h", validity)
	}
	files, err := datadir.New(dataDir)
	if err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(files.CACert)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w (run this on the server's host with its --data-dir)", err)
	}
	keyPEM, err := os.ReadFile(files.CAKey)
	if err != nil {
		return nil, fmt.Errorf("reading the CA key: %w (run this on the server's host with its --data-dir, as the user the server runs as)", err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the CA from %s: %w", files.TLSDir, err)
	}
	admin, err := clientcmd.LoadFromFile(files.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the server's address from %s: %w (start muster-server once with --data-dir %s)", files.AdminKubeconfig, err, files.Dir)
	}
	cluster := admin.Clusters[kubeconfigName]
	if cluster == nil || cluster.Server == "" {
		return nil, fmt.Errorf("%s names no server: start muster-server once with --data-dir %s to rewrite it", files.AdminKubeconfig, files.Dir)
	}
	userCert, userKey, err := ca.IssueClient(name, groups, validity)
	if err != nil {
		return nil, fmt.Errorf("issuing the certificate of %q: %w", name, err)
	}
	// Trust what the server trusts: during a CA rotation its serving
	// certificate is still the retiring CA's.
	trust := ca.CertPEM
	if b, err := readOptional(files.CABundle); err == nil && b != nil {
		trust = b
	}
	return kubeconfigFor(trust, cluster.Server, userCert, userKey)
}

// ReadAdminKubeconfig returns the admin kubeconfig that Ensure wrote in dataDir.
func ReadAdminKubeconfig(dataDir string) ([]byte, error) {
	files, err := datadir.New(dataDir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(files.AdminKubeconfig)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: start muster-server once with --data-dir %s to generate it", files.AdminKubeconfig, files.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	return b, nil
}

// serverURL is where the admin kubeconfig points: the advertise address if
// the operator gave one, else a specific bind address, else 127.0.0.1 (the
// kubeconfig is for use on this host, and a detected address may change).
func serverURL(cfg Config) string {
	host := unbracket(cfg.AdvertiseAddress)
	if host == "" {
		if ip := net.ParseIP(cfg.BindAddress); ip != nil && !ip.IsUnspecified() {
			host = ip.String()
		} else {
			host = "127.0.0.1"
		}
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(cfg.HTTPSPort))
}

func prepareDirs(files Files) error {
	for _, dir := range []string{files.Dir, files.TLSDir} {
		info, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.MkdirAll(dir, dirMode); err != nil {
				return fmt.Errorf("creating data dir %s: %w: create it yourself (mode 0700) or pass a writable --data-dir", dir, err)
			}
			// MkdirAll's mode is filtered by the umask.
			if err := os.Chmod(dir, dirMode); err != nil {
				return fmt.Errorf("setting mode 0700 on %s: %w", dir, err)
			}
		case err != nil:
			return fmt.Errorf("data dir %s: %w: pass a writable --data-dir", dir, err)
		case !info.IsDir():
			return fmt.Errorf("%s is not a directory: move it away or pass another --data-dir", dir)
		case info.Mode().Perm()&0o077 != 0:
			if dir == files.TLSDir {
				klog.InfoS("Restricting the TLS dir to its owner", "dir", dir, "was", info.Mode().Perm())
				if err := os.Chmod(dir, dirMode); err != nil {
					return fmt.Errorf("setting mode 0700 on %s: %w", dir, err)
				}
			} else {
				klog.InfoS("The data dir is accessible to other users; its secrets are 0600 but consider chmod 0700", "dir", dir, "mode", info.Mode().Perm())
			}
		}
	}
	// Fail now with a clear message rather than halfway through.
	probe, err := os.CreateTemp(files.TLSDir, ".write-test-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable: %w: run muster-server as a user that can write it, fix its ownership, or pass another --data-dir", files.Dir, err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return nil
}

func ensureCA(files Files) (*pki.CA, bool, error) {
	certPEM, certErr := readOptional(files.CACert)
	keyPEM, keyErr := readOptional(files.CAKey)
	if certErr != nil {
		return nil, false, certErr
	}
	if keyErr != nil {
		return nil, false, keyErr
	}
	startOver := fmt.Sprintf("only to start over with a new CA (every agent must then re-join, and every kubeconfig be replaced) remove %s and %s", files.CACert, files.CAKey)
	switch {
	case certPEM == nil && keyPEM == nil:
		ca, err := pki.NewCA(fmt.Sprintf("muster-ca@%d", time.Now().Unix()))
		if err != nil {
			return nil, false, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, false, err
		}
		// Key first: a crash between the two writes leaves a key without
		// a certificate, which the next start reports instead of guessing.
		if err := atomicfile.Write(files.CAKey, keyPEM, secretMode); err != nil {
			return nil, false, err
		}
		if err := atomicfile.Write(files.CACert, ca.CertPEM, certMode); err != nil {
			return nil, false, err
		}
		klog.InfoS("Generated a new CA", "subject", ca.Cert.Subject.CommonName, "cert", files.CACert, "hash", pki.Hash(ca.CertPEM))
		return ca, true, nil
	case certPEM == nil:
		return nil, false, fmt.Errorf("the CA key %s exists but the CA certificate %s is missing: restore %s from a backup; %s",
			files.CAKey, files.CACert, files.CACert, startOver)
	case keyPEM == nil:
		return nil, false, fmt.Errorf("the CA certificate %s exists but the CA key %s is missing: restore %s from a backup (muster will not replace an existing CA, because agents pin it); %s",
			files.CACert, files.CAKey, files.CAKey, startOver)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, false, fmt.Errorf("loading the CA from %s and %s: %w: restore both from a backup (muster will not replace an existing CA, because agents pin it); %s",
			files.CACert, files.CAKey, err, startOver)
	}
	if err := restrictMode(files.CAKey); err != nil {
		return nil, false, err
	}
	if left := time.Until(ca.Cert.NotAfter); left < RenewBefore {
		klog.InfoS("WARNING: the CA expires soon and muster cannot rotate it automatically", "cert", files.CACert, "notAfter", ca.Cert.NotAfter)
	}
	return ca, false, nil
}

func ensureToken(files Files, given string) (string, error) {
	b, err := readOptional(files.Token)
	if err != nil {
		return "", err
	}
	if given != "" {
		if len(given) < minTokenLen || strings.ContainsAny(given, " \t\r\n") {
			return "", fmt.Errorf("--token is too short or has whitespace: give at least %d characters on one line (the token in another server's data dir, or a new random one)", minTokenLen)
		}
		if b != nil && strings.TrimSpace(string(b)) != given {
			return "", fmt.Errorf("--token differs from the server token this data dir already has in %s: pass that token, or remove the file if the data dir should join the deployment the --token belongs to", files.Token)
		}
		if b == nil {
			if err := atomicfile.Write(files.Token, []byte(given+"\n"), secretMode); err != nil {
				return "", err
			}
			klog.InfoS("Stored the server token given with --token", "file", files.Token)
		}
		return given, restrictMode(files.Token)
	}
	if b != nil {
		token := strings.TrimSpace(string(b))
		if len(token) < minTokenLen || strings.ContainsAny(token, " \t\r\n") {
			return "", fmt.Errorf("the server token in %s is malformed (empty, shorter than %d characters, or more than one line): restore it from a backup or from another server sharing the datastore; delete it only if no other server shares this datastore",
				files.Token, minTokenLen)
		}
		if err := restrictMode(files.Token); err != nil {
			return "", err
		}
		return token, nil
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating the server token: %w", err)
	}
	token := hex.EncodeToString(raw)
	if err := atomicfile.Write(files.Token, []byte(token+"\n"), secretMode); err != nil {
		return "", err
	}
	klog.InfoS("Generated the server token", "file", files.Token)
	return token, nil
}

// sanSet is the names and IPs a serving certificate must carry, normalised:
// DNS names lower case without a trailing dot, IPs in canonical text form.
type sanSet struct {
	dns []string
	ips []string
}

func (s *sanSet) add(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	// Accept "[::1]" as written in URLs.
	if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")); ip != nil {
		if !slices.Contains(s.ips, ip.String()) {
			s.ips = append(s.ips, ip.String())
		}
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(v, "."))
	if !validDNSName(name) {
		return fmt.Errorf("%q is neither an IP address nor a DNS name", v)
	}
	if !slices.Contains(s.dns, name) {
		s.dns = append(s.dns, name)
	}
	return nil
}

func (s *sanSet) netIPs() []net.IP {
	ips := make([]net.IP, 0, len(s.ips))
	for _, v := range s.ips {
		ips = append(ips, net.ParseIP(v))
	}
	return ips
}

func (s *sanSet) all() []string {
	return append(slices.Clone(s.dns), s.ips...)
}

func requiredSANs(cfg Config, advertise string) (*sanSet, error) {
	s := &sanSet{}
	if host, err := os.Hostname(); err == nil {
		// A host name that is not a valid DNS name is skipped, not fatal:
		// the operator can add one with --tls-san.
		if err := s.add(host); err != nil {
			klog.InfoS("Not adding the host name to the serving certificate", "hostname", host, "reason", err)
		}
	}
	_ = s.add("localhost")
	_ = s.add("127.0.0.1")
	_ = s.add("::1")
	if err := s.add(advertise); err != nil {
		return nil, fmt.Errorf("--advertise-address: %w", err)
	}
	if ip := net.ParseIP(unbracket(cfg.BindAddress)); ip != nil && !ip.IsUnspecified() {
		_ = s.add(ip.String())
	} else {
		// Listening on every address (0.0.0.0, which Go serves dual-stack,
		// or ::): agents may come over either family, so the certificate
		// names this host's first address of each, whichever family
		// --advertise-address is. Others go in with --tls-san.
		for _, v4 := range []bool{true, false} {
			if ip := firstGlobal(v4); ip != "" {
				_ = s.add(ip)
			}
		}
	}
	for _, san := range cfg.TLSSANs {
		if err := s.add(san); err != nil {
			return nil, fmt.Errorf("--tls-san: %w: give a host name such as muster.example.com or an IP", err)
		}
	}
	return s, nil
}

func validDNSName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i, label := range strings.Split(name, ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func ensureServing(files Files, ca *pki.CA, want *sanSet) error {
	reason := "it does not exist"
	cert, err := loadLeaf(files.ServingCert, files.ServingKey, ca, x509.ExtKeyUsageServerAuth)
	switch {
	case err != nil:
		reason = err.Error()
	case cert == nil:
	default:
		have := &sanSet{}
		for _, n := range cert.DNSNames {
			_ = have.add(n)
		}
		for _, ip := range cert.IPAddresses {
			_ = have.add(ip.String())
		}
		added, removed := diff(want.all(), have.all())
		switch {
		case len(added) > 0 || len(removed) > 0:
			reason = "the names it must carry changed"
			klog.InfoS("The serving certificate's names changed", "added", added, "removed", removed)
		case time.Until(cert.NotAfter) < RenewBefore:
			reason = fmt.Sprintf("it expires at %s", cert.NotAfter.Format(time.RFC3339))
		default:
			return restrictMode(files.ServingKey)
		}
	}
	certPEM, keyPEM, err := ca.IssueServing(ServingCommonName, want.dns, want.netIPs(), ServingValidity)
	if err != nil {
		return fmt.Errorf("issuing the serving certificate: %w", err)
	}
	if err := writePair(files.ServingCert, certPEM, files.ServingKey, keyPEM); err != nil {
		return err
	}
	klog.InfoS("Issued the serving certificate", "reason", reason, "names", want.all(), "cert", files.ServingCert)
	return nil
}

func ensureAdmin(files Files, ca *pki.CA) error {
	reason := "it does not exist"
	cert, err := loadLeaf(files.AdminCert, files.AdminKey, ca, x509.ExtKeyUsageClientAuth)
	switch {
	case err != nil:
		reason = err.Error()
	case cert == nil:
	case cert.Subject.CommonName != AdminUser || !slices.Equal(cert.Subject.Organization, []string{AdminGroup}):
		reason = fmt.Sprintf("its identity is %q in %v, not %q in [%s]", cert.Subject.CommonName, cert.Subject.Organization, AdminUser, AdminGroup)
	case time.Until(cert.NotAfter) < RenewBefore:
		reason = fmt.Sprintf("it expires at %s", cert.NotAfter.Format(time.RFC3339))
	default:
		return restrictMode(files.AdminKey)
	}
	certPEM, keyPEM, err := ca.IssueClient(AdminUser, []string{AdminGroup}, AdminValidity)
	if err != nil {
		return fmt.Errorf("issuing the admin certificate: %w", err)
	}
	if err := writePair(files.AdminCert, certPEM, files.AdminKey, keyPEM); err != nil {
		return err
	}
	klog.InfoS("Issued the admin client certificate", "reason", reason, "user", AdminUser, "group", AdminGroup)
	return nil
}

func ensureKubeconfig(state *State) error {
	want, err := AdminKubeconfig(state, state.ServerURL)
	if err != nil {
		return err
	}
	path := state.Files.AdminKubeconfig
	have, err := readOptional(path)
	if err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return restrictMode(path)
	}
	reason := "it does not exist"
	if have != nil {
		reason = "its credentials changed"
		if old, err := clientcmd.Load(have); err != nil {
			reason = "it is not a valid kubeconfig"
		} else if c := old.Clusters[kubeconfigName]; c == nil || c.Server != state.ServerURL {
			from := ""
			if c != nil {
				from = c.Server
			}
			reason = fmt.Sprintf("its server URL changed from %q", from)
		}
	}
	if err := atomicfile.Write(path, want, secretMode); err != nil {
		return err
	}
	klog.InfoS("Wrote the admin kubeconfig", "reason", reason, "file", path, "server", state.ServerURL)
	return nil
}

// loadLeaf returns the certificate at certPath if it and keyPath form a pair
// issued by ca for usage; (nil, nil) if neither file exists; an error saying
// why it is unusable otherwise.
func loadLeaf(certPath, keyPath string, ca *pki.CA, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	certPEM, err := readOptional(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOptional(keyPath)
	if err != nil {
		return nil, err
	}
	switch {
	case certPEM == nil && keyPEM == nil:
		return nil, nil
	case certPEM == nil:
		return nil, fmt.Errorf("%s is missing", certPath)
	case keyPEM == nil:
		return nil, fmt.Errorf("%s is missing", keyPath)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s are not a usable pair: %v", certPath, keyPath, err)
	}
	cert := pair.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %v", certPath, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("%s does not verify against the CA: %v", certPath, err)
	}
	return cert, nil
}

// writePair writes a key and its certificate. The key goes first; a crash in
// between leaves a mismatched pair, which the next start re-issues.
func writePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := atomicfile.Write(keyPath, keyPEM, secretMode); err != nil {
		return err
	}
	return atomicfile.Write(certPath, certPEM, certMode)
}

// readOptional reads path; a missing file is (nil, nil).
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w: check that muster-server runs as the owner of its data dir", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// restrictMode makes an existing secret 0600 if it is readable by others.
func restrictMode(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if info.Mode().Perm()&0o077 == 0 {
		return nil
	}
	klog.InfoS("Restricting a secret file to its owner", "file", path, "was", info.Mode().Perm())
	if err := os.Chmod(path, secretMode); err != nil {
		return fmt.Errorf("setting mode 0600 on %s: %w", path, err)
	}
	return nil
}

// diff returns what is in want but not in have, and the reverse.
func diff(want, have []string) (added, removed []string) {
	for _, v := range want {
		if !slices.Contains(have, v) {
			added = append(added, v)
		}
	}
	for _, v := range have {
		if !slices.Contains(want, v) {
			removed = append(removed, v)
		}
	}
	return added, removed
}

// defaultAdvertiseAddress is the first global-unicast IPv4 of an interface
// that is up and not loopback, else 127.0.0.1.
func defaultAdvertiseAddress() string {
	if ip := firstGlobal(true); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// firstGlobal is the first global-unicast address of the family (IPv4 or
// IPv6) of an interface that is up and not loopback, "" if there is none.
// IPv6 link-local addresses are not global unicast, so never chosen.
func firstGlobal(ipv4 bool) string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipnet, ok := a.(*net.IPNet)
			if !ok || !ipnet.IP.IsGlobalUnicast() || (ipnet.IP.To4() != nil) != ipv4 {
				continue
			}
			return ipnet.IP.String()
		}
	}
	return ""
}

// unbracket is an address as written in a URL ("[2001:db8::1]") without
// its brackets, as the flags take it.
func unbracket(addr string) string {
	addr = strings.TrimSpace(addr)
	if strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]") {
		return addr[1 : len(addr)-1]
	}
	return addr
}
