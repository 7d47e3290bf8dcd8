package agent

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext ends at the first SIGTERM or SIGINT, for a clean stop; a
// second one exits at once, for an agent stuck in its stop. The agent keeps
// its own (instead of k8s.io/apiserver's) so that its binary links none of
// the server's packages.
func SignalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ch
		cancel()
		<-ch
		os.Exit(1)
	}()
	return ctx
}
