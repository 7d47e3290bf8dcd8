// Package proc runs a real server a test needs (etcd, an S3 gateway) as a
// child process: its output goes to a log file for failure messages, and it
// is killed and waited for when the test ends.
package proc

import (
	"os"
	"os/exec"
	"testing"
)

// Proc is a started child process.
type Proc struct {
	cmd     *exec.Cmd
	logFile string
	done    chan struct{}
}

// Start starts cmd with its stdout and stderr in logFile, and stops it when
// t ends. A process that cannot start fails the test.
func Start(t testing.TB, cmd *exec.Cmd, logFile string) *Proc {
	t.Helper()
	logf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	p := &Proc{cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop kills the process and waits for it; stopping twice is fine.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Done is closed once the process has exited: a readiness wait ends early
// on a process that died.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Log is what the process wrote so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}
