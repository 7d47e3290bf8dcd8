package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

// KubernetesPrefix is where the binaries of --kubernetes-assets-dir are
// served: /assets/kubernetes/<version>/<os>-<arch>/<name>[.sha256], for
// the plans the planner writes for Clusters with spec.kubernetes.
const KubernetesPrefix = AssetsPrefix + "kubernetes/"

// KubernetesBinaryNames are the files of a version's platform directory
// the server serves: the binaries a Kubernetes plan may run.
var KubernetesBinaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// KubernetesAssets is --kubernetes-assets-dir, laid out
// DIR/<version>/<os>-<arch>/<name>: the server serves each binary with
// its SHA-256, and the planner pins each plan's downloads by the same
// sums. A file replaced while the server runs is hashed again (its size
// or modification time changed), so a sum is never its predecessor's.
type KubernetesAssets struct {
	Dir  string
	mu   sync.Mutex
	sums map[string]*sum
}

// NewKubernetesAssets serves dir; "" serves nothing.
func NewKubernetesAssets(dir string) *KubernetesAssets {
	return &KubernetesAssets{Dir: dir, sums: map[string]*sum{}}
}

// KubernetesAssetPath is the URL path of a binary of version for platform
// (<os>-<arch>).
func KubernetesAssetPath(version, platform, name string) string {
	return KubernetesPrefix + version + "/" + platform + "/" + name
}

// word: a platform's os or arch as Go names them.
func word(s string) bool {
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

func validPlatform(p string) bool {
	goos, goarch, ok := strings.Cut(p, "-")
	return ok && word(goos) && word(goarch)
}

// file is the path of a binary, after checking that each part is one the
// server serves (never a path out of the directory).
func (k *KubernetesAssets) file(version, platform, name string) (string, error) {
	switch {
	case k == nil || k.Dir == "":
		return "", errNoKubernetesAssets
	case !ValidVersion(version):
		return "", fmt.Errorf("%q is not a Kubernetes version: ask for %s<version>/<os>-<arch>/<name>, e.g. %s", truncateName(version), KubernetesPrefix, KubernetesAssetPath("v1.37.2", "linux-amd64", "kube-apiserver"))
	case !validPlatform(platform):
		return "", fmt.Errorf("%q is not a platform: give <os>-<arch> as Go names them, e.g. linux-amd64", truncateName(platform))
	case !slices.Contains(KubernetesBinaryNames, name):
		return "", fmt.Errorf("%q is not a Kubernetes binary this server serves: it serves %s", truncateName(name), strings.Join(KubernetesBinaryNames, ", "))
	}
	return filepath.Join(k.Dir, version, platform, name), nil
}

var errNoKubernetesAssets = errors.New("this server serves no Kubernetes binaries: start muster-server with --kubernetes-assets-dir DIR holding DIR/<version>/<os>-<arch>/<name>")

// Binaries returns the SHA-256 of each binary the server has for version
// on platform, by name; none (and no error) when it has no such directory.
func (k *KubernetesAssets) Binaries(version, platform string) (map[string]string, error) {
	if k == nil || k.Dir == "" {
		return nil, nil
	}
	if _, err := k.file(version, platform, "kubectl"); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range KubernetesBinaryNames {
		path, _ := k.file(version, platform, name)
		s, err := k.sha256(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hashing %s: %w", path, err)
		}
		out[name] = s
	}
	return out, nil
}

// sha256 hashes a file once per version of it (size and mtime).
func (k *KubernetesAssets) sha256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	k.mu.Lock()
	s, ok := k.sums[path]
	if !ok {
		s = &sum{}
		k.sums[path] = s
	}
	k.mu.Unlock()
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

// Versions lists the versions of the directory, for messages.
func (k *KubernetesAssets) Versions() []string {
	if k == nil || k.Dir == "" {
		return nil
	}
	entries, _ := os.ReadDir(k.Dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && ValidVersion(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// serveKubernetes serves /assets/kubernetes/<version>/<os>-<arch>/<name>[.sha256].
func (h *Handlers) serveKubernetes(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, KubernetesPrefix)
	rest, wantSum := strings.CutSuffix(rest, ".sha256")
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		http.Error(w, fmt.Sprintf("ask for %s<version>/<os>-<arch>/<name>, e.g. %s", KubernetesPrefix, KubernetesAssetPath("v1.37.2", "linux-amd64", "kube-apiserver")), http.StatusBadRequest)
		return
	}
	version, platform, name := parts[0], parts[1], parts[2]
	path, err := h.kubernetes.file(version, platform, name)
	if errors.Is(err, errNoKubernetesAssets) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		klog.InfoS("Kubernetes binary asked for is missing", "version", version, "platform", platform, "name", name, "path", path)
		http.Error(w, fmt.Sprintf("this server has no %s %s for %s: its operator puts it in --kubernetes-assets-dir as <dir>/%s/%s/%s (it has versions: %s)",
			name, version, platform, version, platform, name, strings.Join(h.kubernetes.Versions(), ", ")), http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.Error(w, fmt.Sprintf("%s %s for %s is not available on this server: the file it would serve is not a regular file (the server's log names it)", name, version, platform), http.StatusNotFound)
		klog.InfoS("Kubernetes binary is not a regular file", "path", path)
		return
	}
	if wantSum {
		h.serveSum(w, name, name+" "+version, func() (string, error) { return h.kubernetes.sha256(path) })
		return
	}
	h.serveBinary(w, r, name, f, fi)
}
