package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/install"
	"github.com/muster-io/muster/internal/join"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/kubeconfig"
	"github.com/muster-io/muster/internal/printer"
	"github.com/muster-io/muster/internal/server"
	"github.com/muster-io/muster/internal/serverendpoint"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// adminClient returns a client for the server that --kubeconfig, an
// explicit --data-dir, $KUBECONFIG or the default data dir names, in that
// order (internal/kubeconfig).
func adminClient(cfg *server.Config, kubeconfigFlag *string) func(cmd *cobra.Command) (versioned.Interface, error) {
	return func(cmd *cobra.Command) (versioned.Interface, error) {
		rc, err := credential(cmd, cfg, *kubeconfigFlag).RESTConfig()
		if err != nil {
			return nil, err
		}
		return versioned.NewForConfig(rc)
	}
}

func credential(cmd *cobra.Command, cfg *server.Config, kubeconfigFlag string) kubeconfig.Lookup {
	return kubeconfig.Lookup{Flag: kubeconfigFlag, DataDir: cfg.DataDir, DataDirSet: cmd.Flags().Changed("data-dir")}
}

const kubeconfigUsage = "admin kubeconfig (default: --data-dir's admin.kubeconfig if --data-dir is given, else $KUBECONFIG, else the default data dir's)"

func newTokenCommand(cfg *server.Config) *cobra.Command {
	var kubeconfig string
	client := adminClient(cfg, &kubeconfig)
	cmd := groupCommand("token", "Create, list and revoke join tokens; rotate the server token")
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigUsage)

	opts := jointoken.CreateOptions{}
	var installCommand bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a join token and print it once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.TTL < 0 {
				return fmt.Errorf("--ttl %s is negative: give how long the token may be used, such as 24h, or 0 for a token that never expires", opts.TTL)
			}
			rc, err := credential(cmd, cfg, kubeconfig).RESTConfig()
			if err != nil {
				return err
			}
			c, err := versioned.NewForConfig(rc)
			if err != nil {
				return err
			}
			tok, err := jointoken.Create(cmd.Context(), c.MusterV1alpha1(), opts)
			if err != nil {
				return err
			}
			// The token alone on stdout stays the default: scripts write it
			// to a file. The install command holds the token, so it is
			// printed only where the token is already going: stdout with
			// --install-command, or the terminal the token was printed on.
			if installCommand {
				fmt.Fprintln(cmd.OutOrStdout(), install.Command(advertisedURL(cmd.Context(), c, rc.Host), tok.String()))
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok.String())
			if isTerminal(cmd.OutOrStdout()) {
				fmt.Fprintf(cmd.ErrOrStderr(), "\nOn a fresh Linux host, as root, this installs muster-agent as a service and joins it with this token:\n\n%s\n",
					install.Command(advertisedURL(cmd.Context(), c, rc.Host), tok.String()))
			}
			return nil
		},
	}
	create.Flags().BoolVar(&installCommand, "install-command", false, "print, instead of the bare token, the command that installs muster-agent as a service on a fresh Linux host and joins it with the token (it holds the token)")
	create.Flags().DurationVar(&opts.TTL, "ttl", 24*time.Hour, "how long the token may be used (0: never expires)")
	create.Flags().StringVar(&opts.Cluster, "cluster", "", "bind the token to this existing Cluster")
	create.Flags().BoolVar(&opts.ManualApproval, "manual-approval", false, "registrations with this token wait for 'muster-server registration approve'")
	create.Flags().StringVar(&opts.Description, "description", "", "what the token is for")
	create.Flags().Int32Var(&opts.MaxUses, "max-uses", 0, "how many machines may join with the token (0: no limit)")

	var output string
	list := &cobra.Command{
		Use: "list", Short: "List join tokens", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output %q: give json or yaml, or leave it out for a table", output)
			}
			c, err := client(cmd)
			if err != nil {
				return err
			}
			if output == "" {
				return jointoken.List(cmd.Context(), c.MusterV1alpha1(), cmd.OutOrStdout())
			}
			return printTokens(cmd, c, output)
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "", "json or yaml: the ClusterRegistrationTokens as kubectl would print them (hashes, never secrets)")
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a join token", Args: oneArg("ID", "the first column of 'muster-server token list'"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client(cmd)
			if err != nil {
				return err
			}
			already, err := jointoken.Revoke(cmd.Context(), c.MusterV1alpha1(), args[0])
			if err != nil {
				return err
			}
			if already {
				fmt.Fprintf(cmd.OutOrStdout(), "token %s was already revoked\n", args[0])
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke, newTokenRotateCommand(cfg))
	return cmd
}

func newRegistrationCommand(cfg *server.Config) *cobra.Command {
	var kubeconfig, message, output string
	client := adminClient(cfg, &kubeconfig)
	cmd := groupCommand("registration", "List, approve or deny registrations made with manual-approval tokens")
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigUsage)
	list := &cobra.Command{
		Use: "list", Short: "List registrations, pending first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client(cmd)
			if err != nil {
				return err
			}
			return join.ListRegistrations(cmd.Context(), c, cmd.OutOrStdout(), output, time.Now())
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "", "json or yaml: the ClusterRegistrations as kubectl would print them")
	cmd.AddCommand(list)
	for _, approve := range []bool{true, false} {
		verb := map[bool]string{true: "approve", false: "deny"}[approve]
		decide := &cobra.Command{
			Use: verb + " NODE|NAME", Short: map[bool]string{true: "Approve", false: "Deny"}[approve] + " a node's pending registration", Args: oneArg("NODE|NAME", "a node name or a registration's name: muster-server registration list"),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := client(cmd)
				if err != nil {
					return err
				}
				name, note, err := join.Resolve(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}
				if note != "" {
					fmt.Fprintln(cmd.OutOrStdout(), note)
				}
				if err := join.Decide(cmd.Context(), c, name, approve, message); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "registration %s: %s\n", name, map[bool]string{true: "approved", false: "denied"}[approve])
				return nil
			},
		}
		decide.Flags().StringVar(&message, "message", "", "note recorded in the registration's status")
		cmd.AddCommand(decide)
	}
	return cmd
}

// printTokens prints the tokens as kubectl get -o json|yaml would.
func printTokens(cmd *cobra.Command, c versioned.Interface, format string) error {
	list, err := c.MusterV1alpha1().ClusterRegistrationTokens().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing tokens: %w", err)
	}
	return printer.List(cmd.OutOrStdout(), list, "ClusterRegistrationToken", format)
}

// advertisedURL is the URL agents reach this server at: the admin
// kubeconfig's server, unless that is a loopback address while the servers
// advertise another one (bin/muster-server with no flags advertises its
// first non-loopback IPv4, but its admin kubeconfig says 127.0.0.1). Then a
// live server's advertised address, the one on the kubeconfig's port first.
func advertisedURL(ctx context.Context, c versioned.Interface, kubeconfigHost string) string {
	host := strings.TrimSuffix(kubeconfigHost, "/")
	u, err := url.Parse(host)
	if err != nil || u.Hostname() == "" {
		return host
	}
	if ip := net.ParseIP(u.Hostname()); (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
		return host
	}
	list, err := c.MusterV1alpha1().ServerEndpoints().List(ctx, metav1.ListOptions{})
	if err != nil {
		return host
	}
	var live []string
	now := time.Now()
	for i := range list.Items {
		e := &list.Items[i]
		if !serverendpoint.Live(e, now) {
			continue
		}
		if e.Spec.Address == u.Host {
			return host
		}
		live = append(live, e.Spec.Address)
	}
	sort.Slice(live, func(i, j int) bool {
		_, pi, _ := net.SplitHostPort(live[i])
		_, pj, _ := net.SplitHostPort(live[j])
		if (pi == u.Port()) != (pj == u.Port()) {
			return pi == u.Port()
		}
		return live[i] < live[j]
	})
	if len(live) == 0 {
		return host
	}
	return "https://" + live[0]
}

// isTerminal reports whether w is a terminal, where a person reads it.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
