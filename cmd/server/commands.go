package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// groupCommand is a command that only holds subcommands: with an unknown
// one it fails (cobra would print the help and exit 0, so a typo in a
// script would pass unnoticed).
func groupCommand(use, short string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown command %q for %q; run '%s --help' for its commands", args[0], cmd.CommandPath(), cmd.CommandPath())
		},
	}
}

// oneArg requires exactly one argument, and names it when it is missing.
func oneArg(name, hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("%s needs the %s: %s %s (%s)", cmd.CommandPath(), name, cmd.CommandPath(), name, hint)
		case len(args) > 1:
			return fmt.Errorf("%s takes one %s, got %d: %q", cmd.CommandPath(), name, len(args), args)
		}
		return nil
	}
}
