// Package kubeconfig finds the admin credential muster's client subcommands
// use, in kubectl's order, so that a command that works for kubectl works
// for them too: --kubeconfig, then $KUBECONFIG, then the server's data dir.
package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/muster-io/muster/internal/datadir"

	"github.com/muster-io/muster/internal/atomicfile"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// FileName is the admin kubeconfig a server writes in its data dir.
const FileName = datadir.AdminKubeconfigName

// EnvVar is kubectl's variable: one kubeconfig, or a list merged in order.
const EnvVar = clientcmd.RecommendedConfigPathEnvVar

// Lookup says where to look for the credential.
type Lookup struct {
	// Flag is --kubeconfig; it wins over everything.
	Flag string
	// DataDir is the server's data dir, whose admin.kubeconfig is the last
	// resort, or the first after --kubeconfig when DataDirSet.
	DataDir string
	// DataDirSet: --data-dir was given on the command line, which names a
	// server as explicitly as --kubeconfig does, so it wins over $KUBECONFIG.
	DataDirSet bool
	// Env reads the environment; nil for os.Getenv.
	Env func(string) string
}

// Source is the credential found: the files, merged in order, and how they
// were chosen, for messages.
type Source struct {
	Paths []string
	From  string
}

// Find chooses the kubeconfig files; it does not read them.
func (l Lookup) Find() Source {
	env := l.Env
	if env == nil {
		env = os.Getenv
	}
	dataDir := Source{Paths: []string{filepath.Join(l.DataDir, FileName)}, From: "the data dir " + l.DataDir}
	switch {
	case l.Flag != "":
		return Source{Paths: []string{l.Flag}, From: "--kubeconfig"}
	case l.DataDirSet:
		dataDir.From = "--data-dir"
		return dataDir
	}
	var paths []string
	for _, p := range filepath.SplitList(env(EnvVar)) {
		if p != "" {
			paths = append(paths, p)
		}
	}
	if len(paths) > 0 {
		return Source{Paths: paths, From: "$" + EnvVar}
	}
	return dataDir
}

// ServerDataDir is the data dir of a command that reads the server's files or
// datastore directly (history, datastore, token rotate), chosen by the same
// rule as the credential (Find), so that every command of one shell finds
// the same server: --data-dir when given; else, when $KUBECONFIG names one
// admin kubeconfig inside a server's data dir (as after `make run` and the
// README's export), that data dir; else the default data dir.
func (l Lookup) ServerDataDir() string {
	if l.DataDirSet {
		return l.DataDir
	}
	env := l.Env
	if env == nil {
		env = os.Getenv
	}
	paths := filepath.SplitList(env(EnvVar))
	if len(paths) != 1 || filepath.Base(paths[0]) != FileName {
		return l.DataDir
	}
	dir := filepath.Dir(paths[0])
	layout, err := datadir.New(dir)
	if err != nil {
		return l.DataDir
	}
	if _, err := os.Stat(layout.CACert); err != nil {
		return l.DataDir // an admin.kubeconfig copied elsewhere, not a data dir
	}
	return layout.Dir
}

// RESTConfig finds and loads the credential, with an error that says what
// was tried and how to point the command elsewhere.
func (l Lookup) RESTConfig() (*rest.Config, error) {
	src := l.Find()
	cfg, err := load(src).ClientConfig()
	if err != nil {
		return nil, l.explain(src, err)
	}
	return cfg, nil
}

// Flatten returns the credential as one self-contained kubeconfig (the
// current context only, certificates inline), fit to copy to another
// machine. The data dir's file is that already and is returned as it is.
func (l Lookup) Flatten() ([]byte, error) {
	src := l.Find()
	if src.From != "--kubeconfig" && src.From != "$"+EnvVar {
		b, err := os.ReadFile(src.Paths[0])
		if err != nil {
			return nil, l.explain(src, err)
		}
		return b, nil
	}
	raw, err := load(src).RawConfig()
	if err == nil {
		err = clientcmdapi.MinifyConfig(&raw)
	}
	if err == nil {
		err = clientcmdapi.FlattenConfig(&raw)
	}
	if err != nil {
		return nil, l.explain(src, err)
	}
	return clientcmd.Write(raw)
}

// WriteFile writes a kubeconfig so that path holds either the whole of it
// or what it held before: a shell redirection (> file) leaves an empty file
// behind when the command fails, this does not. It is written 0600, as it
// holds a private key.
func WriteFile(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("%w; choose a writable --output", err)
	}
	return nil
}

func load(src Source) clientcmd.ClientConfig {
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: src.Paths}
	if len(src.Paths) == 1 {
		// A single file must exist; a list, as kubectl merges it, may have holes.
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: src.Paths[0]}
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
}

func (l Lookup) explain(src Source, err error) error {
	switch src.From {
	case "--kubeconfig":
		return fmt.Errorf("loading the kubeconfig %s: %w", src.Paths[0], err)
	case "$" + EnvVar:
		return fmt.Errorf("loading $%s=%s: %w; fix or unset $%s, or pass --kubeconfig FILE", EnvVar, strings.Join(src.Paths, string(os.PathListSeparator)), err, EnvVar)
	}
	if os.IsNotExist(err) || strings.Contains(err.Error(), "no such file") {
		err = fmt.Errorf("%s does not exist", src.Paths[0])
	}
	return fmt.Errorf("no admin credential: %w; pass --data-dir with the server's data dir (the one given to muster-server, e.g. muster-data for 'make run'), --kubeconfig FILE, or set $%s", err, EnvVar)
}
