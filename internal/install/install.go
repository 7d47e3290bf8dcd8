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
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
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

// maxDownloads bounds the binaries sent at once: anyone may ask for one,
// and each is tens of megabytes. More get 429 and retry.
const maxDownloads = 16

// Config names the binaries served. Empty paths default to the files beside
// the server's own executable.
type Config struct {
	// AgentBinary is the muster-agent served as muster-agent-<os>-<arch>
	// (--agent-binary).
	AgentBinary string
	// ServerBinary is the muster-server served as muster-server-<os>-<arch>,
	// for installing more servers; default the running executable.
	ServerBinary string
	// AgentBinariesDir holds agent binaries by version, named
	// muster-agent-<version>-<os>-<arch> (--agent-binaries-dir); each is
	// served at /assets/agent/<version>/muster-agent-<os>-<arch>, for plans
	// that upgrade agents (spec.agentUpgrade). Empty: none.
	AgentBinariesDir string
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
func AgentBinary(given string) string {
	if given != "" {
		return given
	}
	self, err := os.Executable()
	if err != nil {
		return "muster-agent"
	}
	return filepath.Join(filepath.Dir(self), "muster-agent")
}

// Handlers serves /install.sh and /assets/.
type Handlers struct {
	assets map[string]string // asset name → file
	// versionsDir is --agent-binaries-dir.
	versionsDir string
	slots       chan struct{}
	mu          sync.Mutex
	sums        map[string]sum
}

type sum struct {
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
	h := &Handlers{
		assets: map[string]string{"muster-agent-" + platform: cfg.AgentBinary, "muster-server-" + platform: cfg.ServerBinary},
		slots:  make(chan struct{}, maxDownloads),
		sums:   map[string]sum{},
	}
	if cfg.AgentBinariesDir != "" {
		h.versionsDir = cfg.AgentBinariesDir
		go h.hashVersions()
	}
	if fi, err := os.Stat(cfg.AgentBinary); err != nil || !fi.Mode().IsRegular() {
		klog.InfoS("No agent binary to serve at /assets/: install.sh cannot install agents until one is given with --agent-binary", "path", cfg.AgentBinary)
	}
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
	} else {
		var ok bool
		if path, ok = h.assets[name]; !ok {
			http.Error(w, fmt.Sprintf("this server has no asset %q; it serves %s and %s<version>/muster-agent-<os>-<arch>", name, strings.Join(h.names(), ", "), VersionedPrefix), http.StatusNotFound)
			return
		}
		key = name
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "5")
		http.Error(w, fmt.Sprintf("%d downloads are in progress; retry in a few seconds", maxDownloads), http.StatusTooManyRequests)
		return
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
		hexSum, err := h.sha256(key, f, fi)
		if err != nil {
			http.Error(w, fmt.Sprintf("reading %s: %v", path, err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s  %s\n", hexSum, name)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, name, fi.ModTime(), f)
}

// sha256 hashes a binary once per version of the file (size and mtime), so
// that a replaced binary is never published with its predecessor's sum.
func (h *Handlers) sha256(name string, f *os.File, fi os.FileInfo) (string, error) {
	h.mu.Lock()
	s, ok := h.sums[name]
	h.mu.Unlock()
	if ok && s.size == fi.Size() && s.modTime.Equal(fi.ModTime()) {
		return s.hex, nil
	}
	d := sha256.New()
	if _, err := io.Copy(d, f); err != nil {
		return "", err
	}
	s = sum{size: fi.Size(), modTime: fi.ModTime(), hex: hex.EncodeToString(d.Sum(nil))}
	h.mu.Lock()
	h.sums[name] = s
	h.mu.Unlock()
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
	var n []string
	for name := range h.assets {
		n = append(n, name, name+".sha256")
	}
	sort.Strings(n)
	return n
}
