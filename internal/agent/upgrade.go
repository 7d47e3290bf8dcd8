package agent

// Agent upgrades (spec.agentUpgrade): the agent downloads the named
// version from its server, checks it against the plan's SHA-256, runs it
// once as a self-check, swaps it in beside its own executable (keeping the
// running one as <exe>.previous) and execs it. The new agent confirms the
// upgrade by checking in; if it cannot by the deadline it puts the
// previous binary back and execs that, which then fails the plan with the
// reason. At no point is <exe> missing: the old binary is hard-linked to
// <exe>.previous and the new one renamed over <exe>, both atomic.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/version"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

const (
	// upgradeMarkerFile records an upgrade under way, in the data dir.
	upgradeMarkerFile = "agent-upgrade.json"
	// defaultUpgradeTimeout is how long a new agent has to check in.
	defaultUpgradeTimeout = 120 * time.Second
	// selfCheckTimeout bounds the new binary's `version` run.
	selfCheckTimeout = 15 * time.Second
	// maxAgentBinary bounds a download: an agent is tens of megabytes.
	maxAgentBinary = 512 << 20
	previousSuffix = ".previous"
)

// upgradeMarker is the state an upgrade leaves for the agent that starts
// after the exec (the new one, or the previous one put back).
type upgradeMarker struct {
	From     string    `json:"from"`
	To       string    `json:"to"`
	Plan     string    `json:"plan"`
	Deadline time.Time `json:"deadline"`
	// Failed, when set, is why the upgrade was undone.
	Failed string `json:"failed,omitempty"`
}

func readMarker(dir dataDir) (*upgradeMarker, error) {
	b, err := os.ReadFile(dir.path(upgradeMarkerFile))
	if err != nil {
		return nil, err
	}
	var m upgradeMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir.path(upgradeMarkerFile), err)
	}
	return &m, nil
}

func writeMarker(dir dataDir, m *upgradeMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return dir.write(upgradeMarkerFile, b) // 0600, atomic
}

func removeMarker(dir dataDir) { _ = os.Remove(dir.path(upgradeMarkerFile)) }

// upgradeState is shared by the start-up watchdog, the heartbeat's
// check-in and the plan runner.
type upgradeState struct {
	once sync.Once
	// confirmed is closed once no upgrade awaits confirmation.
	confirmed chan struct{}
	checkOnce sync.Once
	// checkedIn is closed once a check-in succeeded: the Machine shows
	// this agent's version.
	checkedIn chan struct{}
	// pending is the upgrade awaiting confirmation, nil if none.
	pending *upgradeMarker
}

func (s *upgradeState) confirm() { s.once.Do(func() { close(s.confirmed) }) }

// noteCheckIn is told of each successful check-in (liveness.go).
func (a *agent) noteCheckIn() {
	if u := a.upgrade; u != nil {
		u.checkOnce.Do(func() { close(u.checkedIn) })
	}
}

// resumeUpgrade runs at start: an agent that finds a marker naming its own
// version is the new agent, and must check in by the deadline or put the
// previous binary back.
func (a *agent) resumeUpgrade(ctx context.Context) {
	a.upgrade = &upgradeState{confirmed: make(chan struct{}), checkedIn: make(chan struct{})}
	if !a.cfg.SelfUpgrade {
		a.upgrade.confirm() // inside muster-server: never upgraded by a plan
		return
	}
	removeStaleDownloads()
	m, err := readMarker(a.dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.say("ignoring the upgrade marker: %v", err)
			removeMarker(a.dir)
		}
		a.upgrade.confirm()
		return
	}
	if m.To != version.Version || m.Failed != "" {
		// The previous agent, put back: the plan runner reports why.
		if m.Failed == "" {
			m.Failed = fmt.Sprintf("muster-agent %s started instead of %s after the upgrade", version.Version, m.To)
			_ = writeMarker(a.dir, m)
		}
		a.upgrade.confirm()
		return
	}
	if !time.Now().Before(m.Deadline) {
		// Started again after the deadline (the new agent stopped or
		// crashed, and systemd restarted it): put the previous one back.
		a.rollback(m, fmt.Sprintf("muster-agent %s did not check in with the server by %s", m.To, m.Deadline.UTC().Format(time.RFC3339)))
		return // rollback returns only when it could not: this agent carries on
	}
	a.upgrade.pending = m
	a.say("upgraded from muster-agent %s to %s; checking in before %s, else the previous agent is put back",
		m.From, m.To, m.Deadline.UTC().Format(time.RFC3339))
	go a.awaitCheckIn(ctx, m)
}

// awaitCheckIn confirms the upgrade once the agent has checked in, or
// rolls back at the deadline. It looks once a second: a check-in seen
// after the deadline does not count, so the outcome is the deadline's,
// never a race between the two.
func (a *agent) awaitCheckIn(ctx context.Context, m *upgradeMarker) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !time.Now().Before(m.Deadline) {
			a.rollback(m, fmt.Sprintf("muster-agent %s did not check in with the server by %s", m.To, m.Deadline.UTC().Format(time.RFC3339)))
			return
		}
		select {
		case <-a.upgrade.checkedIn:
			removeMarker(a.dir)
			a.say("upgrade to muster-agent %s confirmed: the Machine shows it", m.To)
			a.upgrade.confirm()
			return
		default:
		}
	}
}

// upgradeStopped is told why Run is ending with an error: a new agent
// that stops before its upgrade was confirmed puts the previous one back
// at once rather than leave the machine with an agent that does not run.
func (a *agent) upgradeStopped(err error) {
	u := a.upgrade
	if u == nil || u.pending == nil {
		return
	}
	select {
	case <-u.confirmed:
		return
	default:
	}
	a.rollback(u.pending, fmt.Sprintf("muster-agent %s stopped before checking in: %v", u.pending.To, err))
}

// rollback puts <exe>.previous back and execs it; the previous agent
// finds the marker and fails the plan with reason. If it cannot, this
// agent keeps running (a running agent beats none) and says so.
func (a *agent) rollback(m *upgradeMarker, reason string) {
	keep := func() {
		removeMarker(a.dir)
		if a.upgrade != nil {
			a.upgrade.confirm()
		}
	}
	exe, err := executable()
	if err != nil {
		a.say("cannot roll back the upgrade (%s): %v; this agent (%s) keeps running", reason, err, version.Version)
		keep()
		return
	}
	failed := *m
	failed.Failed = reason + fmt.Sprintf("; muster-agent %s was put back", m.From)
	if err := writeMarker(a.dir, &failed); err != nil {
		a.say("cannot record the failed upgrade: %v", err)
	}
	if err := os.Rename(exe+previousSuffix, exe); err != nil {
		a.say("cannot put back %s (%v) after: %s; this agent (%s) keeps running: replace %s by hand if it misbehaves", exe+previousSuffix, err, reason, version.Version, exe)
		keep()
		return
	}
	a.say("%s; putting back muster-agent %s and restarting it", reason, m.From)
	err = syscall.Exec(exe, os.Args, os.Environ())
	a.say("restarting %s: %v; restart the agent by hand (systemctl restart muster-agent)", exe, err)
}

// removeStaleDownloads deletes what an agent stopped mid-download left
// beside the executable.
func removeStaleDownloads() {
	exe, err := executable()
	if err != nil {
		return
	}
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(exe), "."+filepath.Base(exe)+".upgrade-*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
}

func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(exe)
}

// upgradeForPlan carries out plan's agentUpgrade. It returns nil when
// this agent already is the version asked for (and has checked in); on
// success otherwise it does not return: the process is replaced.
func (a *agent) upgradeForPlan(ctx context.Context, plan *api.MachinePlan) (string, error) {
	u := plan.Spec.AgentUpgrade
	if u.Version == version.Version {
		if a.upgrade == nil {
			return "", nil
		}
		select {
		case <-a.upgrade.confirmed:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if m := a.upgrade.pending; m != nil && m.Plan == plan.Status.Checksum {
			return fmt.Sprintf("muster-agent upgraded from %s to %s", m.From, m.To), nil
		}
		return "", nil
	}
	if !a.cfg.SelfUpgrade {
		return "", fmt.Errorf("this machine's agent runs inside muster-server (--with-agent) at version %s and is upgraded with the server, not by agentUpgrade %s: "+
			"leave this machine out of the plan set's selector, or upgrade its muster-server", version.Version, u.Version)
	}
	err := a.install(ctx, plan)
	return "", err
}

// install replaces this agent with plan's agentUpgrade, and execs it.
func (a *agent) install(ctx context.Context, plan *api.MachinePlan) error {
	u := plan.Spec.AgentUpgrade
	if m, err := readMarker(a.dir); err == nil {
		removeMarker(a.dir)
		if m.Plan == plan.Status.Checksum && m.Failed != "" {
			return fmt.Errorf("upgrading to muster-agent %s failed: %s", u.Version, m.Failed)
		}
	}
	want, err := upgradeSHA256(u)
	if err != nil {
		return err
	}
	exe, err := executable()
	if err != nil {
		return fmt.Errorf("finding this agent's executable to replace: %w", err)
	}
	httpc, base, err := a.downloadClient()
	if err != nil {
		return err
	}
	a.say("upgrading from muster-agent %s to %s", version.Version, u.Version)
	tmp, err := downloadAgent(ctx, httpc, base, u, want, exe)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // gone once renamed
	if err := selfCheck(ctx, tmp, u.Version); err != nil {
		return err
	}
	timeout := defaultUpgradeTimeout
	if u.TimeoutSeconds > 0 {
		timeout = time.Duration(u.TimeoutSeconds) * time.Second
	}
	m := &upgradeMarker{From: version.Version, To: u.Version, Plan: plan.Status.Checksum, Deadline: time.Now().Add(timeout)}
	if err := writeMarker(a.dir, m); err != nil {
		return fmt.Errorf("recording the upgrade in %s: %w; check the data dir is writable", a.dir, err)
	}
	if err := swapBinary(exe, tmp); err != nil {
		removeMarker(a.dir)
		return err
	}
	a.say("installed muster-agent %s as %s (the previous one is %s); restarting into it", u.Version, exe, exe+previousSuffix)
	err = syscall.Exec(exe, os.Args, os.Environ())
	// Exec failed: the old binary is still this process; put it back.
	_ = os.Rename(exe+previousSuffix, exe)
	removeMarker(a.dir)
	return fmt.Errorf("starting muster-agent %s from %s: %w; the previous agent was put back", u.Version, exe, err)
}

// upgradeSHA256 is the SHA-256 u gives for this agent's own platform: the
// binary the agent downloads is the one of its GOOS/GOARCH, so the sum is
// that binary's. A plan that gives none for it fails before anything is
// downloaded.
func upgradeSHA256(u *api.AgentUpgrade) (string, error) {
	if sum := u.SHA256For(runtime.GOOS, runtime.GOARCH); sum != "" {
		return sum, nil
	}
	listed := make([]string, 0, len(u.Platforms))
	for _, p := range u.Platforms {
		listed = append(listed, p.Platform)
	}
	own := runtime.GOOS + "/" + runtime.GOARCH
	return "", fmt.Errorf("this plan's agentUpgrade gives no SHA-256 for this machine's platform %s (it gives %s): add {platform: %s, sha256: <%s>} to spec.agentUpgrade.platforms, "+
		"or leave this machine out of the plan set's selector; nothing was downloaded or replaced",
		Platform(), strings.Join(listed, ", "), own, strings.ReplaceAll(strings.ReplaceAll(sha256HintFor(u.Version), "<os>", runtime.GOOS), "<arch>", runtime.GOARCH))
}

// sha256HintFor is the command that prints the sum of version's binary.
func sha256HintFor(version string) string {
	return "kubectl get --raw " + install.VersionedAgentPath(version, "<os>", "<arch>") + ".sha256 | cut -d' ' -f1"
}

// downloadClient is an HTTPS client that trusts only the pinned CA and
// presents the machine's certificate, and the server's base URL.
func (a *agent) downloadClient() (*http.Client, string, error) {
	server := a.cfg.Server
	if s, err := a.dir.read(serverFile); err == nil && server == "" {
		server = s
	}
	if a.lb != nil {
		server = "https://" + a.lb.Address()
	}
	cfg := &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{
		CAFile: a.dir.path(caFile), CertFile: a.dir.path(certFile), KeyFile: a.dir.path(keyFile)}}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("loading the pinned CA and certificate in %s to download the agent: %w", a.dir, err)
	}
	return &http.Client{Transport: a.dialer().Transport(tlsConfig)}, strings.TrimRight(server, "/"), nil
}

// downloadAgent fetches the agent binary of u.Version for this platform
// into a temporary file beside exe (0755), and checks its SHA-256 against
// want. It returns the temporary file's path.
func downloadAgent(ctx context.Context, c *http.Client, base string, u *api.AgentUpgrade, want, exe string) (string, error) {
	url := base + install.VersionedAgentPath(u.Version, runtime.GOOS, runtime.GOARCH)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", fmt.Errorf("downloading muster-agent %s from %s: %w", u.Version, url, err)
		}
		if resp.StatusCode == http.StatusTooManyRequests && attempt < 30 {
			resp.Body.Close()
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Duration(1+attempt%5) * time.Second):
			}
			continue
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			return "", fmt.Errorf("downloading muster-agent %s from %s: %s: %s", u.Version, url, resp.Status, strings.TrimSpace(string(msg)))
		}
		return writeVerified(resp.Body, u, want, exe)
	}
}

// writeVerified writes r to a temporary file beside exe, keeping it only
// if its SHA-256 is want.
func writeVerified(r io.Reader, u *api.AgentUpgrade, want, exe string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(exe), "."+filepath.Base(exe)+".upgrade-*")
	if err != nil {
		return "", fmt.Errorf("writing the new agent beside %s: %w; the agent's directory must be writable by it", exe, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	d := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, d), io.LimitReader(r, maxAgentBinary+1))
	if err != nil {
		return "", fmt.Errorf("downloading muster-agent %s: %w", u.Version, err)
	}
	if n > maxAgentBinary {
		return "", fmt.Errorf("muster-agent %s is larger than %d bytes; refusing it", u.Version, maxAgentBinary)
	}
	got := hex.EncodeToString(d.Sum(nil))
	if !strings.EqualFold(got, want) {
		field := "spec.agentUpgrade.sha256"
		if len(u.Platforms) > 0 {
			field = "the " + runtime.GOOS + "/" + runtime.GOARCH + " entry of spec.agentUpgrade.platforms"
		}
		return "", fmt.Errorf("muster-agent %s downloaded has SHA-256 %s but the plan says %s: refusing it, nothing was replaced; "+
			"put the sum from /assets/agent/%s/muster-agent-%s-%s.sha256 in %s if that binary is the one to install",
			u.Version, got, strings.ToLower(want), u.Version, runtime.GOOS, runtime.GOARCH, field)
	}
	if err := f.Chmod(0o755); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	ok = true
	return f.Name(), nil
}

// selfCheck runs `<bin> version`: a build that cannot start, or is not the
// version the plan names, is never installed.
func selfCheck(ctx context.Context, bin, want string) error {
	ctx, cancel := context.WithTimeout(ctx, selfCheckTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if len(text) > 512 {
		text = text[:512] + "..."
	}
	if ctx.Err() != nil {
		return fmt.Errorf("self-check of muster-agent %s: `version` did not finish within %s; not installed, this agent keeps running", want, selfCheckTimeout)
	}
	if err != nil {
		return fmt.Errorf("self-check of muster-agent %s failed (%v): %q; not installed, this agent keeps running: check the binary in --agent-binaries-dir", want, err, text)
	}
	if !strings.Contains(" "+text+" ", " "+want+" ") {
		return fmt.Errorf("self-check of muster-agent %s: the binary says %q, not version %s; not installed: check the file in --agent-binaries-dir", want, text, want)
	}
	return nil
}

// swapBinary makes newBin the agent at exe, keeping the current one as
// exe.previous: a hard link (or copy) first, then one rename over exe, so
// that exe always names a complete, working binary.
func swapBinary(exe, newBin string) error {
	prev := exe + previousSuffix
	_ = os.Remove(prev)
	if err := os.Link(exe, prev); err != nil {
		if err := copyFile(exe, prev); err != nil {
			return fmt.Errorf("keeping the current agent as %s: %w; nothing was replaced", prev, err)
		}
	}
	if err := os.Rename(newBin, exe); err != nil {
		return fmt.Errorf("installing the new agent as %s: %w; nothing was replaced", exe, err)
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(to)
		return err
	}
	return out.Close()
}
