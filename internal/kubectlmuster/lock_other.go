//go:build !unix

package kubectlmuster

// lockFile does not lock where flock is missing: concurrent refreshes may
// then spend a rotated refresh token twice, and one asks to sign in again.
func lockFile(string) (func(), error) { return func() {}, nil }
