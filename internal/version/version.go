// Package version is muster's own version, set at build time by the Makefile.
package version

// Version is overwritten with -ldflags "-X .../internal/version.Version=...".
var Version = "dev"
