// Package install is the k3s-style install: the script every muster-server
// serves at /install.sh and the binaries it downloads from /assets/, each
// published with its SHA-256 so that the script can refuse a tampered one.
package install

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/ratelimit"
)

// Script is install.sh, served as is.
//
//go:embed install.sh
var Script []byte

// Paths served, to anyone: an agent has no credential before it joins.
const (
	ScriptPath   = "/install.sh"
	AssetsPrefix = "/assets/"
)

// Limits on the binaries sent at once. Anyone may ask for one, and each
// is tens of megabytes that a client may read as slowly as it likes; so
// a download holds a slot of its client's own, and a client that holds
// its slots only blocks itself. Clients without credentials (install.sh
// on a new machine) are counted by address, authenticated ones (an agent
// upgrading, with its machine certificate) by identity, in pools of their
// own: no number of anonymous clients can block an agent's upgrade. Past
// a limit the answer is 429 with Retry-After; install.sh (curl --retry)
// and agents retry. The small answers (/install.sh, .sha256, /cacerts)
// take no slot and never wait behind a download.
const (
	// AnonymousPerAddress and AnonymousTotal bound the downloads of
	// clients without credentials: per client address, and in all.
	AnonymousPerAddress, AnonymousTotal = 4, 64
	// AuthenticatedPerUser and AuthenticatedTotal bound the downloads of
	// authenticated clients: per identity, and in all.
	AuthenticatedPerUser, AuthenticatedTotal = 2, 64
	// retryAfter is what a refused download is told to wait, in seconds:
	// a download on a LAN takes about that long.
	retryAfter = 5
)

// A download must keep moving, or it is cut off and its slot freed:
// every chunk of DownloadChunk bytes must be taken by the client within
// DownloadStall (at least 3.2 KiB/s, chunk by chunk), and the whole at an
// average of at least MinDownloadRate after DownloadGrace. A client
// reading at 2 KiB/s is cut off DownloadStall after its socket's buffers
// fill; a 16 MiB agent binary may take at most DownloadGrace + 16 MiB /
// MinDownloadRate = 9 min. A client cut off may resume with a Range
// request (http.ServeContent serves ranges).
const (
	MinDownloadRate = 32 << 10 // bytes per second: 256 kbit/s
	DownloadGrace   = 30 * time.Second
	DownloadStall   = 10 * time.Second
	DownloadChunk   = 32 << 10
)

// Config names the binaries served. Empty paths default to the files beside
// the server's own executable.
type Config struct {
	// AgentBinary is the muster-agent served as muster-agent-<os>-<arch>
	// for the server's own platform (--agent-binary).
	AgentBinary string
	// AgentAssetsDir holds agents for other architectures, named
	// muster-agent-<os>-<arch> as `make release` names them; each is served
	// at /assets/ under its name (--agent-assets-dir). Empty: the directory
	// of the server's own executable, so that a server run from a release
	// directory publishes every agent beside it.
	AgentAssetsDir string
	// ServerBinary is the muster-server served as muster-server-<os>-<arch>,
	// for installing more servers; default the running executable.
	ServerBinary string
	// AgentBinariesDir holds agent binaries by version, named
	// muster-agent-<version>-<os>-<arch> (--agent-binaries-dir); each is
	// served at /assets/agent/<version>/muster-agent-<os>-<arch>, for plans
	// that upgrade agents (spec.agentUpgrade). Empty: none.
	AgentBinariesDir string
	// Kubernetes is --kubernetes-assets-dir, served at
	// /assets/kubernetes/<version>/<os>-<arch>/<name>. Nil: none.
	Kubernetes *KubernetesAssets
	// Caller names the authenticated caller of a request, "" for an
	// anonymous one: downloads are limited per identity when there is one,
	// else per address. The server's API chain knows (apiserver.CallerName);
	// this package does not import it, since the agent links this one.
	Caller func(*http.Request) string
}

// VersionedPrefix is where agent binaries are served by version:
// /assets/agent/<version>/muster-agent-<os>-<arch>[.sha256].
const VersionedPrefix = AssetsPrefix + "agent/"

// maxVersionLen bounds a version in a path, as the plan's validation does.
const maxVersionLen = 64

// ValidVersion reports whether v may name an agent binary: 1-64 letters,
// digits, '.', '_', '+', '-', starting with a letter or digit (so never
// "." or ".." and never a path).
func ValidVersion(v string) bool {
	if v == "" || len(v) > maxVersionLen {
		return false
	}
	for i, c := range v {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '+' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// VersionedAgentPath is the URL path of the agent binary of version for
// goos/goarch.
func VersionedAgentPath(version, goos, goarch string) string {
	return VersionedPrefix + version + "/muster-agent-" + goos + "-" + goarch
}

// AgentBinary is the muster-agent the server hands out (install.sh, the
// process driver): the one given, else the one beside the server's own
// executable.
// Beside it, a release directory names it muster-agent-<os>-<arch>.
func AgentBinary(given string) string {
	if given != "" {
		return given
	}
	self, err := os.Executable()
	if err != nil {
		return "muster-agent"
	}
	plain := filepath.Join(filepath.Dir(self), "muster-agent")
	if _, err := os.Stat(plain); err != nil {
		if released := filepath.Join(filepath.Dir(self), AgentAsset(runtime.GOOS, runtime.GOARCH)); isFile(released) {
			return released
		}
	}
	return plain
}

// AgentAsset is the name an agent binary for goos/goarch is published
// under at /assets/ and built under by `make release`.
func AgentAsset(goos, goarch string) string { return "muster-agent-" + goos + "-" + goarch }

// PlatformsAsset lists, one "<os>/<arch>" a line, the platforms this
// server has an agent for: install.sh names them when the host's is
// missing.
const PlatformsAsset = "muster-agent.platforms"

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// Handlers serves /install.sh and /assets/.
type Handlers struct {
	assets map[string]string // asset name → file, for the server's own platform
	// agentsDir is --agent-assets-dir: muster-agent-<os>-<arch> files.
	agentsDir string
	// versionsDir is --agent-binaries-dir.
	versionsDir string
	// kubernetes is --kubernetes-assets-dir.
	kubernetes *KubernetesAssets
	// anonymous and authenticated hold the downloads in progress.
	anonymous, authenticated *ratelimit.Slots
	pace                     pace
	caller                   func(*http.Request) string
	mu                       sync.Mutex
	sums                     map[string]*sum
}

// sum is the SHA-256 of one asset; its own lock makes concurrent first
// requests hash the file once, while the others wait for the result.
type sum struct {
	mu      sync.Mutex
	size    int64
	modTime time.Time
	hex     string
}

// New resolves the binaries' defaults. A missing binary is not an error:
// the server runs, and a request for it gets a 404 that says what to do.
func New(cfg Config) *Handlers {
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	if cfg.ServerBinary == "" {
		cfg.ServerBinary = self
	}
	cfg.AgentBinary = AgentBinary(cfg.AgentBinary)
	platform := runtime.GOOS + "-" + runtime.GOARCH
	if cfg.AgentAssetsDir == "" && self != "" {
		cfg.AgentAssetsDir = filepath.Dir(self)
	}
	h := &Handlers{
		assets:        map[string]string{"muster-agent-" + platform: cfg.AgentBinary, "muster-server-" + platform: cfg.ServerBinary},
		agentsDir:     cfg.AgentAssetsDir,
		anonymous:     ratelimit.NewSlots(AnonymousPerAddress, AnonymousTotal),
		authenticated: ratelimit.NewSlots(AuthenticatedPerUser, AuthenticatedTotal),
		pace:          pace{minRate: MinDownloadRate, grace: DownloadGrace, stall: DownloadStall},
		sums:          map[string]*sum{},
		caller:        cfg.Caller,
		kubernetes:    cfg.Kubernetes,
	}
	if h.caller == nil {
		h.caller = func(*http.Request) string { return "" }
	}
	if cfg.AgentBinariesDir != "" {
		h.versionsDir = cfg.AgentBinariesDir
		go h.hashVersions()
	}
	if !isFile(cfg.AgentBinary) {
		klog.InfoS("No agent binary for this server's own platform to serve at /assets/: install.sh cannot install agents on "+runtime.GOOS+"/"+runtime.GOARCH+" until one is given with --agent-binary", "path", cfg.AgentBinary)
	}
	klog.InfoS("Agent binaries served at /assets/ for install.sh", "platforms", strings.Join(h.Platforms(), ","), "agentAssetsDir", h.agentsDir)
	return h
}

// Paths are the non-resource paths to serve, to anyone; a path ending in
// "/" is a prefix.
func (h *Handlers) Paths() map[string]http.Handler {
	return map[string]http.Handler{ScriptPath: http.HandlerFunc(h.script), AssetsPrefix: http.HandlerFunc(h.asset)}
}

func (h *Handlers) script(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/x-shellscript; charset=utf-8")
	_, _ = w.Write(Script)
}

func (h *Handlers) asset(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	if strings.HasPrefix(r.URL.Path, KubernetesPrefix) {
		h.serveKubernetes(w, r)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, AssetsPrefix)
	name, wantSum := strings.CutSuffix(name, ".sha256")
	var path, key string
	if rest, versioned := strings.CutPrefix(r.URL.Path, VersionedPrefix); versioned {
		rest = strings.TrimSuffix(rest, ".sha256")
		version, file, ok := strings.Cut(rest, "/")
		if !ValidVersion(version) {
			http.Error(w, fmt.Sprintf("%q is not an agent version: a version is 1-%d letters, digits, '.', '_', '+' or '-', starting with a letter or digit; ask for /assets/agent/<version>/muster-agent-<os>-<arch>",
				truncateName(version), maxVersionLen), http.StatusBadRequest)
			return
		}
		goos, goarch, okPlatform := platformOf(file)
		if !ok || !okPlatform {
			http.Error(w, fmt.Sprintf("%q is not an agent binary: ask for /assets/agent/%s/muster-agent-<os>-<arch>, e.g. muster-agent-%s-%s",
				truncateName(file), version, runtime.GOOS, runtime.GOARCH), http.StatusBadRequest)
			return
		}
		if h.versionsDir == "" {
			http.Error(w, "this server serves no agent binaries by version: start muster-server with --agent-binaries-dir DIR holding muster-agent-<version>-<os>-<arch> files", http.StatusNotFound)
			return
		}
		name = file
		key = "agent/" + version + "/" + file
		path = filepath.Join(h.versionsDir, "muster-agent-"+version+"-"+goos+"-"+goarch)
		if _, err := os.Stat(path); err != nil {
			// The path is for the operator's log: these answers are public.
			klog.InfoS("Agent binary asked for is missing", "version", version, "os", goos, "arch", goarch, "path", path)
			http.Error(w, fmt.Sprintf("this server has no muster-agent %s for %s/%s: its operator puts that build in --agent-binaries-dir (the server's log names the file it looked for), or ask for a version it has", version, goos, goarch), http.StatusNotFound)
			return
		}
	} else if name == PlatformsAsset && !wantSum {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, p := range h.Platforms() {
			fmt.Fprintln(w, p)
		}
		return
	} else if goos, goarch, ok := platformOf(name); ok {
		path = h.agentPath(goos, goarch)
		key = name
		if path == "" {
			have := h.Platforms()
			if len(have) == 0 {
				have = []string{"none"}
			}
			http.Error(w, fmt.Sprintf("this server has no muster-agent for %s/%s; it has agents for: %s. Its operator puts %s (make release builds it) in --agent-assets-dir (default: beside muster-server)",
				goos, goarch, strings.Join(have, ", "), AgentAsset(goos, goarch)), http.StatusNotFound)
			return
		}
	} else {
		if path, ok = h.assets[name]; !ok {
			http.Error(w, fmt.Sprintf("this server has no asset %q; it serves %s, %s and %s<version>/muster-agent-<os>-<arch>", name, strings.Join(h.names(), ", "), PlatformsAsset, VersionedPrefix), http.StatusNotFound)
			return
		}
		key = name
	}
	f, err := os.Open(path)
	if err != nil {
		klog.InfoS("Asset asked for is missing", "asset", name, "path", path)
		http.Error(w, fmt.Sprintf("%s is not available on this server: its operator starts muster-server with --agent-binary pointing at a muster-agent built for %s/%s (the server's log names the file it looked for)",
			name, runtime.GOOS, runtime.GOARCH), http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		klog.InfoS("Asset is not a regular file", "asset", name, "path", path)
		http.Error(w, fmt.Sprintf("%s is not available on this server: the file it would serve is not a regular file (the server's log names it)", name), http.StatusNotFound)
		return
	}
	if wantSum {
		h.serveSum(w, name, path, func() (string, error) { return h.sha256(key, f, fi) })
		return
	}
	h.serveBinary(w, r, name, f, fi)
}

// serveSum answers NAME.sha256 as sha256sum prints it.
func (h *Handlers) serveSum(w http.ResponseWriter, name, what string, sum func() (string, error)) {
	hexSum, err := sum()
	if err != nil {
		http.Error(w, fmt.Sprintf("reading %s: %v", what, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "%s  %s\n", hexSum, name)
}

// serveBinary sends f, in a download slot of r's client (429 with none
// free) and at the server's pace; HEAD takes no slot.
func (h *Handlers) serveBinary(w http.ResponseWriter, r *http.Request, name string, f *os.File, fi os.FileInfo) {
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.Method == http.MethodHead {
		http.ServeContent(w, r, name, fi.ModTime(), f)
		return
	}
	release, refusal := h.take(r)
	if release == nil {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		http.Error(w, refusal, http.StatusTooManyRequests)
		return
	}
	defer release()
	h.pace.serve(w, r, name, fi.ModTime(), f)
}

// take takes a download slot for r's client: by identity when it is
// authenticated, else by address. With none free, release is nil and
// refusal says why and what to do.
func (h *Handlers) take(r *http.Request) (release func(), refusal string) {
	if name := h.caller(r); name != "" {
		release, why := h.authenticated.Take(name)
		switch why {
		case ratelimit.KeyFull:
			return nil, fmt.Sprintf("%s already has %d downloads from this server in progress (at most %d at once): finish one, then retry in %ds", name, AuthenticatedPerUser, AuthenticatedPerUser, retryAfter)
		case ratelimit.AllFull:
			return nil, fmt.Sprintf("this server is sending %d binaries to authenticated clients, its most at once: retry in %ds (agents retry by themselves)", AuthenticatedTotal, retryAfter)
		}
		return release, ""
	}
	addr := ratelimit.Address(r)
	release, why := h.anonymous.Take(addr)
	switch why {
	case ratelimit.KeyFull:
		return nil, fmt.Sprintf("%s already has %d downloads from this server in progress (at most %d per address): finish or cancel one, then retry in %ds (install.sh retries by itself)", addr, AnonymousPerAddress, AnonymousPerAddress, retryAfter)
	case ratelimit.AllFull:
		return nil, fmt.Sprintf("this server is sending %d binaries to clients without credentials, its most at once: retry in %ds (install.sh retries by itself)", AnonymousTotal, retryAfter)
	}
	return release, ""
}

// pace is the minimum pace of a download.
type pace struct {
	minRate      float64 // bytes per second, on average after grace
	grace, stall time.Duration
}

// serve serves content as http.ServeContent does (ranges included), with
// a write deadline per chunk: a client that does not keep up with p is
// cut off, so that it cannot hold its slot and the server's goroutine
// and file for as long as it likes.
func (p pace) serve(w http.ResponseWriter, r *http.Request, name string, modTime time.Time, content io.ReadSeeker) {
	rc := http.NewResponseController(w)
	start := time.Now()
	if err := rc.SetWriteDeadline(start.Add(p.grace)); err != nil {
		// Unpaced, a slow client could hold its slot as long as it likes.
		klog.ErrorS(err, "Cannot pace a download: the server's response writer sets no write deadline", "path", r.URL.Path)
		http.Error(w, "this server cannot bound the download's duration, so it does not start it; the server's log says why", http.StatusInternalServerError)
		return
	}
	pw := &pacedWriter{ResponseWriter: w, rc: rc, pace: p, start: start}
	http.ServeContent(pw, r, name, modTime, content)
	if pw.err != nil {
		klog.V(4).InfoS("Download cut off: the client did not keep up", "path", r.URL.Path, "remote", r.RemoteAddr, "sent", pw.written, "after", time.Since(pw.start).Round(time.Millisecond), "err", pw.err)
		return
	}
	// What is still buffered goes out under the same rule, then the
	// connection is free of deadlines for its next request.
	_ = rc.SetWriteDeadline(time.Now().Add(p.stall))
	_ = rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
}

// IsDownload reports whether r asks for a binary (not its .sha256): a
// request that paces itself (MinDownloadRate, DownloadStall) and may last
// longer than the API's request timeout on a slow link.
func IsDownload(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, AssetsPrefix) && !strings.HasSuffix(r.URL.Path, ".sha256")
}

// pacedWriter writes in chunks, each with its deadline.
type pacedWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	pace    pace
	start   time.Time
	written int64
	err     error
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), DownloadChunk)]
		// Due when the average since the start would fall under minRate
		// (after the grace), and at most stall from now.
		now := time.Now()
		due := p.start.Add(p.pace.grace + time.Duration(float64(p.written+int64(len(c)))/p.pace.minRate*float64(time.Second)))
		if stall := now.Add(p.pace.stall); stall.Before(due) {
			due = stall
		}
		if err := p.rc.SetWriteDeadline(due); err != nil {
			p.err = fmt.Errorf("setting the download's write deadline: %w", err)
			return n, p.err
		}
		m, err := p.ResponseWriter.Write(c)
		n += m
		p.written += int64(m)
		if err != nil {
			p.err = err
			return n, err
		}
		b = b[len(c):]
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (p *pacedWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// sha256 hashes a binary once per version of the file (size and mtime), so
// that a replaced binary is never published with its predecessor's sum.
// Concurrent requests for a sum not yet known hash the file once: the
// others wait for it, so that a burst of .sha256 requests reads the
// binary once, not once each.
func (h *Handlers) sha256(name string, f *os.File, fi os.FileInfo) (string, error) {
	h.mu.Lock()
	s, ok := h.sums[name]
	if !ok {
		s = &sum{}
		h.sums[name] = s
	}
	h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hex != "" && s.size == fi.Size() && s.modTime.Equal(fi.ModTime()) {
		return s.hex, nil
	}
	d := sha256.New()
	if _, err := io.Copy(d, f); err != nil {
		return "", err
	}
	s.size, s.modTime, s.hex = fi.Size(), fi.ModTime(), hex.EncodeToString(d.Sum(nil))
	return s.hex, nil
}

// platformOf parses muster-agent-<os>-<arch> into its os and arch, each a
// plain lower-case word.
func platformOf(file string) (string, string, bool) {
	rest, ok := strings.CutPrefix(file, "muster-agent-")
	if !ok {
		return "", "", false
	}
	goos, goarch, ok := strings.Cut(rest, "-")
	word := func(s string) bool {
		if s == "" || len(s) > 16 {
			return false
		}
		for _, c := range s {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				return false
			}
		}
		return true
	}
	return goos, goarch, ok && word(goos) && word(goarch)
}

func truncateName(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// hashVersions hashes every binary of --agent-binaries-dir once at start,
// so that the first .sha256 requests of a fleet-wide upgrade do not each
// read tens of megabytes; sha256 hashes a file again when it changes.
func (h *Handlers) hashVersions() {
	entries, err := os.ReadDir(h.versionsDir)
	if err != nil {
		klog.InfoS("Cannot read --agent-binaries-dir: agent upgrades will fail to download until it is readable", "dir", h.versionsDir, "err", err)
		return
	}
	n := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "muster-agent-")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		// muster-agent-<version>-<os>-<arch>: os and arch are the last two words.
		parts := strings.Split(rest, "-")
		if len(parts) < 3 {
			continue
		}
		version := strings.Join(parts[:len(parts)-2], "-")
		file := "muster-agent-" + parts[len(parts)-2] + "-" + parts[len(parts)-1]
		if !ValidVersion(version) {
			continue
		}
		f, err := os.Open(filepath.Join(h.versionsDir, e.Name()))
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil {
			if _, err := h.sha256("agent/"+version+"/"+file, f, fi); err == nil {
				n++
			}
		}
		f.Close()
	}
	klog.InfoS("Agent binaries by version served at "+VersionedPrefix+"<version>/muster-agent-<os>-<arch>", "dir", h.versionsDir, "binaries", n)
}

func (h *Handlers) names() []string {
	seen := map[string]bool{}
	for name := range h.assets {
		seen[name] = true
	}
	for _, p := range h.Platforms() {
		goos, goarch, _ := strings.Cut(p, "/")
		seen[AgentAsset(goos, goarch)] = true
	}
	var n []string
	for name := range seen {
		n = append(n, name, name+".sha256")
	}
	sort.Strings(n)
	return n
}

// agentPath is the file served as muster-agent-<goos>-<goarch>, "" if
// there is none: --agent-binary for the server's own platform, else the
// file of that name in --agent-assets-dir.
func (h *Handlers) agentPath(goos, goarch string) string {
	name := AgentAsset(goos, goarch)
	if own, ok := h.assets[name]; ok && isFile(own) {
		return own
	}
	if h.agentsDir != "" {
		if p := filepath.Join(h.agentsDir, name); isFile(p) {
			return p
		}
	}
	return ""
}

// Platforms lists the "<os>/<arch>" this server has an agent binary for,
// sorted: its own (--agent-binary) and those in --agent-assets-dir. The
// directory is read on each call, so that an agent added while the server
// runs is served.
func (h *Handlers) Platforms() []string {
	seen := map[string]bool{}
	own := AgentAsset(runtime.GOOS, runtime.GOARCH)
	if p, ok := h.assets[own]; ok && isFile(p) {
		seen[runtime.GOOS+"/"+runtime.GOARCH] = true
	}
	if h.agentsDir != "" {
		entries, _ := os.ReadDir(h.agentsDir)
		for _, e := range entries {
			if goos, goarch, ok := platformOf(e.Name()); ok && isFile(filepath.Join(h.agentsDir, e.Name())) {
				seen[goos+"/"+goarch] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
