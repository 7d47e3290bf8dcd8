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
	slots  chan struct{}
	mu     sync.Mutex
	sums   map[string]sum
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
	path, ok := h.assets[name]
	if !ok {
		http.Error(w, fmt.Sprintf("this server has no asset %q; it serves %s", name, strings.Join(h.names(), ", ")), http.StatusNotFound)
		return
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
		http.Error(w, fmt.Sprintf("%s is not available on this server (%s is missing): start muster-server with --agent-binary pointing at a muster-agent built for %s/%s",
			name, path, runtime.GOOS, runtime.GOARCH), http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.Error(w, fmt.Sprintf("%s is not a regular file on this server", path), http.StatusNotFound)
		return
	}
	if wantSum {
		hexSum, err := h.sha256(name, f, fi)
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

func (h *Handlers) names() []string {
	var n []string
	for name := range h.assets {
		n = append(n, name, name+".sha256")
	}
	sort.Strings(n)
	return n
}
