package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/muster-io/muster/internal/bootstrap"
)

// secretSource is one setting that may hold a secret: its flag, a flag
// naming a file that holds it, and an environment variable. A command line
// is readable by every local user (/proc/PID/cmdline) for the process's
// whole life; a file or the environment is not.
type secretSource struct {
	flag, fileFlag, env string
	value, file         string
	getenv              func(string) string
}

// resolve returns the flag's value, else the file's content (trailing
// newline dropped), else the environment variable's; empty if none is set.
func (s secretSource) resolve() (string, error) {
	if s.value != "" && s.file != "" {
		return "", fmt.Errorf("--%s and --%s are both given: keep one (--%s keeps the secret off the command line)", s.flag, s.fileFlag, s.fileFlag)
	}
	if s.value != "" {
		return s.value, nil
	}
	if s.file != "" {
		b, err := os.ReadFile(s.file)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", s.fileFlag, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("--%s %s is empty: write the value in it, or drop the flag", s.fileFlag, s.file)
		}
		return v, nil
	}
	getenv := s.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	return strings.TrimSpace(getenv(s.env)), nil
}

// passwordInURL reports whether a datastore endpoint carries a password.
func passwordInURL(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		return false
	}
	_, ok := u.User.Password()
	return ok
}

// currentServerToken is the deployment's server token for a command run
// beside the servers: from --token-file FILE or $MUSTER_TOKEN, else the one
// in the data dir.
func currentServerToken(dataDir, file string) (string, error) {
	token, err := secretSource{flag: "token", fileFlag: "token-file", env: "MUSTER_TOKEN", file: file}.resolve()
	if err != nil || token != "" {
		return token, err
	}
	return bootstrap.ReadToken(dataDir)
}
