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
	return root
}
