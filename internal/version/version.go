// Package version is muster's own version, set at build time by the Makefile.
package version

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Version is overwritten with -ldflags "-X .../internal/version.Version=...".
var Version = "dev"

// Command is the `version` subcommand of binary (muster-server, muster-agent).
func Command(binary string) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the version of " + binary, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s, %s/%s)\n", binary, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
