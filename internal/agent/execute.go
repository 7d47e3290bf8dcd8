package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// pipeGrace is how long a command that has exited may leave its output
// pipe open (a background child holding it) before the agent stops
// reading: the command's result is known, and its children are not the
// agent's to wait for.
const pipeGrace = 2 * time.Second

// result is how one command ended.
type result struct {
	// output is the combined stdout and stderr, at most maxOutput bytes.
	output string
	// exitCode is -1 when the command did not start or was killed.
	exitCode int
	// err says why the command failed, in words for the plan's status.
	err error
}

// run runs a command in its own process group, bounded by timeout: at the
// timeout the whole group is killed (a shell's background children too),
// and the agent waits for the output pipe at most pipeGrace after that.
// Output is capped while it is read, never buffered whole.
func run(ctx context.Context, timeout time.Duration, command string, args, env []string) result {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, command, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The negative pid is the process group the command leads.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = pipeGrace
	out := newCappedBuffer(maxOutput)
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	res := result{exitCode: -1}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	switch {
	case cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		res.exitCode = -1
		res.err = fmt.Errorf("timed out after %s; its process group was killed", timeout)
	case ctx.Err() != nil:
		res.err = fmt.Errorf("stopped: the agent is shutting down")
	case errors.Is(err, exec.ErrWaitDelay):
		// It exited 0 but left a child holding its output: a daemon it
		// started. Its result stands; the child keeps running.
	case err != nil && cmd.ProcessState == nil:
		res.err = fmt.Errorf("could not start: %w", err)
	case err != nil:
		res.err = fmt.Errorf("%v", err) // "exit status 3", "signal: killed"
	}
	res.output = truncate([]byte(out.String()))
	return res
}

// cappedBuffer keeps the first and the last bytes written to it, at most
// limit in all, and counts what it dropped between them: the start of a
// command's output says what it did, the end why it stopped.
type cappedBuffer struct {
	mu         sync.Mutex
	head, tail []byte
	headMax    int
	tailMax    int
	dropped    int64
}

func newCappedBuffer(limit int) *cappedBuffer {
	// Room for the line that says how much was left out.
	const marker = 64
	half := (limit - marker) / 2
	return &cappedBuffer{headMax: half, tailMax: limit - marker - half}
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if room := b.headMax - len(b.head); room > 0 {
		take := min(room, len(p))
		b.head = append(b.head, p[:take]...)
		p = p[take:]
	}
	if len(p) == 0 {
		return n, nil
	}
	// The tail keeps the last tailMax bytes; what falls out of it is dropped.
	if len(p) >= b.tailMax {
		b.dropped += int64(len(b.tail) + len(p) - b.tailMax)
		b.tail = append(b.tail[:0], p[len(p)-b.tailMax:]...)
		return n, nil
	}
	if over := len(b.tail) + len(p) - b.tailMax; over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	b.tail = append(b.tail, p...)
	return n, nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return string(b.head) + string(b.tail)
	}
	return fmt.Sprintf("%s\n… %d bytes left out …\n%s", b.head, b.dropped, b.tail)
}
