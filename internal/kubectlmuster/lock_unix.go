//go:build unix

package kubectlmuster

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile holds an exclusive lock on path (created 0600) until unlock:
// kubectl commands run at once share one refresh, instead of each spending
// the refresh token (which the provider may rotate, so that all but one
// would fail).
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the token cache's lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the token cache %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
