package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/version"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// The agent's protocol, shared with `muster-agent simulate` so that a load
// test exercises the code real agents run: pin the CA, register, check
// in, send heartbeats (RunPlans reports plans).

// PinCA fetches the server's CA and accepts it only if its SHA-256 is the
// token's (K10<hash>): nothing is sent to a server before that. insecure
// accepts a token without a hash, loudly. dial opens the connection (nil:
// directly); through a proxy the hash check is what makes the CA trusted.
func PinCA(ctx context.Context, server string, tok jointoken.Token, insecure bool, dial func(ctx context.Context, network, address string) (net.Conn, error), say func(format string, args ...interface{})) ([]byte, error) {
	say("fetching the CA from %s/cacerts", server)
	ca, err := jointoken.FetchCA(ctx, server, dial)
	if errors.Is(err, jointoken.ErrBadServerURL) {
		return nil, fatal("%v", err)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(ca)
	switch {
	case tok.CAHash == "" && !insecure:
		return nil, fatal("the token has no CA hash (K10<hash>::...), so the server cannot be verified: use the full token, or --insecure-skip-ca-check")
	case tok.CAHash == "":
		say("WARNING: not verifying the server's CA (--insecure-skip-ca-check): anyone on the path could impersonate the server")
	case hex.EncodeToString(sum[:]) != tok.CAHash:
		return nil, fatal("the server's CA (sha256 %x) does not match the token's (%s): refusing to send any credential. "+
			"Check --server, or make a new token on this server ('muster-server token create'): a token made before the server's CA was rotated (muster-server certificate rotate-ca) no longer matches", sum, tok.CAHash)
	default:
		say("verified the server's CA against the token (sha256 %s…)", tok.CAHash[:12])
	}
	return ca, nil
}

// Registration is what an agent says about itself when it asks for a certificate.
type Registration struct {
	NodeName, ClientID, NodePassword string
	Labels                           map[string]string
	Roles                            []string
	Addresses                        []api.MachineAddress
}

// Register asks for a certificate with a fresh key and waits for the
// grant; it returns the granted registration and the key. c carries the
// join token when joining, the current certificate when renewing. An error
// IsFinal when the server refused; any other may pass if tried again.
func Register(ctx context.Context, c musterclient.MusterV1alpha1Interface, id Registration, say func(format string, args ...interface{})) (*api.ClusterRegistration, []byte, error) {
	key, keyPEM, err := pki.NewPrivateKey()
	if err != nil {
		return nil, nil, err
	}
	csr, err := pki.NewCSR(id.NodeName, key)
	if err != nil {
		return nil, nil, err
	}
	clientRandom, _ := randomHex(16)()
	reg := &api.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(id.ClientID, clientRandom)},
		Spec: api.ClusterRegistrationSpec{
			ClientID: id.ClientID, ClientRandom: clientRandom, NodeName: id.NodeName,
			Labels: id.Labels, Roles: id.Roles, CSR: csr, NodePassword: id.NodePassword,
			AgentVersion: version.Version, Addresses: id.Addresses,
		},
	}
	regs := c.ClusterRegistrations()
	say("registering node %s (clientID %s)", id.NodeName, id.ClientID)
	created, err := regs.Create(ctx, reg, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		if refused(err) || apierrors.IsInvalid(err) {
			return nil, nil, fatal("the server refused the registration: %w", err)
		}
		return nil, nil, err
	}
	// A token that needs no approval is granted in the create's answer.
	if err == nil && created.Status.Phase == api.RegistrationPhaseGranted {
		return created, keyPEM, nil
	}
	if err == nil {
		// Not granted in its own request: the token asks for an
		// operator's approval, and the operator needs the node's name.
		say("waiting for the registration %s of node %s to be approved: muster-server registration approve %s", reg.Name, id.NodeName, id.NodeName)
	} else {
		say("waiting for the registration %s to be granted", reg.Name)
	}
	// Poll briskly at first (a grant takes milliseconds), then back off
	// for registrations that wait for an operator.
	interval := 100 * time.Millisecond
	for {
		// Served from the server's watch cache: polling costs the
		// datastore nothing, and a grant shows up within milliseconds.
		got, err := regs.Get(ctx, reg.Name, metav1.GetOptions{ResourceVersion: "0"})
		wait := interval
		switch {
		case err != nil && refused(err):
			return nil, nil, fatal("the server refused the registration: %w", err)
		case apierrors.IsNotFound(err):
			// Just created; not in the cache yet.
		case err != nil:
			// A server restarting or busy: the registration is stored, so
			// keep waiting for it rather than registering again.
			wait = retryWait(err, interval)
			say("reading the registration: %v; retrying in %s", err, wait.Round(time.Millisecond))
		case got.Status.Phase == api.RegistrationPhaseGranted:
			return got, keyPEM, nil
		case got.Status.Phase == api.RegistrationPhaseDenied || got.Status.Phase == api.RegistrationPhaseExpired:
			return nil, nil, fatal("the registration was %s: %s", strings.ToLower(string(got.Status.Phase)), got.Status.Message)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(wait):
		}
		interval = min(interval*2, 2*time.Second)
	}
}

// IsFinal reports whether err is the server's final word (a refusal, a
// denial): trying again with the same credential cannot change it.
func IsFinal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// Refused reports whether the server judged the credential and said no
// (401/403): the answer to a certificate whose Machine is gone.
func Refused(err error) bool { return refused(err) }

// Retryable reports whether trying err's request again may succeed: the
// server was unreachable, restarting or busy, and did not refuse.
func Retryable(err error) bool { return !IsFinal(err) && transient(err) }

// RetryWait is how long to wait before trying again after err: the
// server's Retry-After, else backoff with jitter.
func RetryWait(err error, backoff time.Duration) time.Duration { return retryWait(err, backoff) }

// CheckIn makes the Machine show the agent's version, platform and addresses,
// writing only when they changed: a read from the server's watch cache,
// and a conflict means it lagged, so the retry reads the stored object.
func CheckIn(ctx context.Context, c musterclient.MusterV1alpha1Interface, machine string, addrs []api.MachineAddress) error {
	machines := c.Machines()
	read := metav1.GetOptions{ResourceVersion: "0"}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := machines.Get(ctx, machine, read)
		read.ResourceVersion = ""
		if err != nil {
			return err
		}
		platform := Platform()
		if m.Status.AgentVersion == version.Version && m.Status.Platform == platform && equalAddresses(m.Status.Addresses, addrs) {
			return nil
		}
		m.Status.AgentVersion, m.Status.Platform, m.Status.Addresses = version.Version, platform, addrs
		_, err = machines.UpdateStatus(ctx, m, metav1.UpdateOptions{})
		return err
	})
}

// Heartbeat shows the server the agent is alive (api.HeartbeatPath): the
// server notes it in memory, at no datastore cost.
func Heartbeat(ctx context.Context, c musterclient.MusterV1alpha1Interface) error {
	return c.RESTClient().Get().AbsPath(api.HeartbeatPath).Do(ctx).Error()
}
