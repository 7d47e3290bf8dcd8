package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/console"
	"github.com/muster-io/muster/internal/server"
)

func newConsoleTokenCommand(cfg *server.Config) *cobra.Command {
	var kubeconfig, user string
	var groups []string
	var ttl time.Duration
	client := adminClient(cfg, &kubeconfig)
	cmd := &cobra.Command{
		Use:   "console-token --user NAME --group GROUP...",
		Short: "Mint a short-lived token to sign in to the web console (/console/) and print it once",
		Long: "Mint a token to sign in to the web console at https://SERVER/console/ as NAME in GROUPs\n" +
			"(muster:viewers read; muster:operators also approve registrations). Only its hash is stored;\n" +
			"the token is printed once. Every console action is authorized as that user, like kubectl.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return fmt.Errorf("--user is required: the name the console signs in as, e.g. --user alice --group muster:viewers")
			}
			c, err := client(cmd)
			if err != nil {
				return err
			}
			out, err := console.MintVia(cmd.Context(), c.MusterV1alpha1().RESTClient(), user, groups, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), out.Token)
			// The console is on the server this kubeconfig reaches.
			at := c.MusterV1alpha1().RESTClient().Get().URL()
			fmt.Fprintf(cmd.ErrOrStderr(), "console token for %s %v, valid until %s: paste it at %s://%s/console/ (shown once)\n", out.User, out.Groups, out.Expires.Format(time.RFC3339), at.Scheme, at.Host)
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigUsage)
	cmd.Flags().StringVar(&user, "user", "", "user name the console signs in as")
	cmd.Flags().StringSliceVar(&groups, "group", nil, "group of that user (repeatable): muster:viewers, muster:operators")
	cmd.Flags().DurationVar(&ttl, "ttl", 8*time.Hour, "how long the token and its sessions last (at most 168h)")
	return cmd
}
