// kubectl-muster is a kubectl plugin: on PATH, `kubectl muster ...` runs
// it. It reaches machines through their agents' tunnels:
//
//	kubectl muster exec machine/edge-1 -- uptime
//	kubectl muster port-forward machine/edge-1 9100
//	kubectl muster logs machine/edge-1
//
// and prints a kubeconfig for a cluster's own API through the server:
//
//	kubectl muster kubeconfig prod > prod.kubeconfig
//
// and signs people in with the organisation's identity provider (OIDC):
//
//	kubectl muster login --server https://muster:9443 --issuer https://idp --client-id muster-cli
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"context"
	"github.com/spf13/cobra"

	"github.com/muster-io/muster/internal/kubectlmuster"
	"github.com/muster-io/muster/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newCommand().ExecuteContext(ctx)
	stop()
	var exit *kubectlmuster.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.Code)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	o := kubectlmuster.Options{Stdout: os.Stdout, Stderr: os.Stderr}
	root := &cobra.Command{
		Use:           "kubectl-muster",
		Short:         "Reach muster Machines through their agents: exec, port-forward, logs",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&o.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	root.PersistentFlags().StringVar(&o.Context, "context", "", "the kubeconfig context to use")
	var output string
	kubeconfig := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Print a kubeconfig for CLUSTER's own Kubernetes API through the server (/k8s/clusters/CLUSTER), as the current kubeconfig's user",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.ClusterKubeconfig(cmd.Context(), args[0], output)
		},
	}
	kubeconfig.Flags().StringVarP(&output, "output", "o", "", "write the kubeconfig to this file (mode 0600) instead of stdout; it holds your credentials")
	root.AddCommand(kubeconfig)
	root.AddCommand(&cobra.Command{
		Use:   "exec machine/NAME -- COMMAND [ARGS...]",
		Short: "Run a command on a machine; its stdout, stderr and exit code come back",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			machine, err := kubectlmuster.ParseMachine(args[0])
			if err != nil {
				return err
			}
			if cmd.ArgsLenAtDash() != 1 {
				return fmt.Errorf("give the command after --, e.g. kubectl muster exec machine/%s -- uptime", machine)
			}
			return o.Exec(cmd.Context(), machine, args[1:])
		},
	}, &cobra.Command{
		Use:   "port-forward machine/NAME LOCAL[:REMOTE]",
		Short: "Forward 127.0.0.1:LOCAL here to 127.0.0.1:REMOTE on the machine (a port its agent allows with --allow-port)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			machine, err := kubectlmuster.ParseMachine(args[0])
			if err != nil {
				return err
			}
			local, remote, err := kubectlmuster.ParsePorts(args[1])
			if err != nil {
				return err
			}
			return o.PortForward(cmd.Context(), machine, local, remote, nil)
		},
	}, &cobra.Command{
		Use:   "logs machine/NAME",
		Short: "Print the recent log of the machine's agent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			machine, err := kubectlmuster.ParseMachine(args[0])
			if err != nil {
				return err
			}
			return o.Logs(cmd.Context(), machine)
		},
	})
	var login kubectlmuster.LoginOptions
	var token kubectlmuster.Provider
	loginCmd := &cobra.Command{
		Use:   "login --server URL --issuer URL --client-id ID",
		Short: "Sign in with the organisation's identity provider (OIDC) and write a kubeconfig whose user is this sign-in",
		Long: `Sign in with the identity provider the server trusts (its --authentication-config):
through a browser (authorization code with PKCE; the URL is printed, the answer comes
back to a listener on 127.0.0.1), or with --device on a host without a browser (a code
to enter on another device). The ID token and refresh token are kept in a file of mode
0600; the kubeconfig's user runs 'kubectl muster token', which refreshes the ID token
when it expires. Then plain kubectl commands run as the person the provider signed in.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Login(cmd.Context(), login)
		},
	}
	tokenCmd := &cobra.Command{
		Use:   "token --issuer URL --client-id ID",
		Short: "Print an ExecCredential with a live ID token (the credential plugin 'kubectl muster login' writes into the kubeconfig)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Token(cmd.Context(), token)
		},
	}
	for _, c := range []struct {
		cmd *cobra.Command
		p   *kubectlmuster.Provider
	}{{loginCmd, &login.Provider}, {tokenCmd, &token}} {
		f := c.cmd.Flags()
		f.StringVar(&c.p.Issuer, "issuer", "", "the identity provider's issuer URL (https://), as the server's --authentication-config names it")
		f.StringVar(&c.p.IssuerCA, "issuer-ca", "", "PEM file of the CA that signed the identity provider's certificate (default: the system's roots)")
		f.StringVar(&c.p.ClientID, "client-id", "", "the public client registered with the identity provider for kubectl")
		f.StringSliceVar(&c.p.Scopes, "scopes", nil, "scopes to ask for beside openid and offline_access (default: profile,email,groups)")
		f.BoolVar(&c.p.Device, "device", false, "sign in with the device flow (a code to enter in a browser elsewhere), for a host without a browser")
		f.StringVar(&c.p.CacheDir, "cache-dir", "", "directory of the token cache (default: ~/.kube/cache/muster-oidc)")
		f.StringVar(&c.p.Listen, "listen", "", "loopback address for the browser's redirect (default: 127.0.0.1 on a free port)")
		f.BoolVar(&c.p.OpenBrowser, "open-browser", true, "open the sign-in URL with the desktop's browser (the URL is printed either way)")
	}
	loginCmd.Flags().StringVar(&login.Server, "server", "", "the muster-server's URL, https://HOST:PORT")
	loginCmd.Flags().StringVar(&login.CertificateAuthority, "certificate-authority", "", "PEM file of the muster-server's CA (its /cacerts)")
	loginCmd.Flags().StringVar(&login.Name, "name", "muster-oidc", "name of the kubeconfig's cluster, user and context")
	root.AddCommand(loginCmd, tokenCmd)
	return root
}
