// Package tunnel is the reverse tunnel between muster-server and its
// agents, both ends: the agent (Client) makes one long-lived full-duplex
// request (POST Path) on the HTTP/2 connection it already holds to the
// server, and the server (Hub) runs a stream multiplexer (yamux) over that
// request's two bodies. Only the server opens streams; the agent accepts
// those its flags allow (exec, port-forward to allowed loopback ports, its
// own log) and refuses the rest itself. So a machine behind NAT, or one that
// accepts no inbound connection at all, can still be reached, and the
// agent, not only the server, decides what may be reached on it.
package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
)

// Path is where an agent opens its tunnel (POST, machine certificate).
const Path = "/tunnel"

// Stream kinds the server may ask an agent for.
const (
	KindExec        = "exec"
	KindPortForward = "portforward"
	KindLog         = "log"
	// KindKubeAPI is a connection to the kube-apiserver on the machine's
	// loopback, for the server's proxy of the cluster's API
	// (/k8s/clusters/<name>/). It is apart from a port-forward so that
	// the agent reaches that port for the proxy alone, which
	// authenticates as the cluster's own credential and impersonates
	// the user, never for a user's port-forward.
	KindKubeAPI = "kubeapi"
)

// Limits shared by the server (which checks first, to answer 4xx) and the
// agent (which checks again: it trusts no one with its own limits).
const (
	// MaxArgvBytes bounds an exec's command line, arguments included.
	MaxArgvBytes = 64 << 10
	// MaxHeaderBytes bounds a stream's request and reply headers.
	MaxHeaderBytes = MaxArgvBytes + 4<<10
	// MaxFrameBytes bounds one exec output frame.
	MaxFrameBytes = 32 << 10
	// DefaultMaxStreams is how many streams one tunnel carries at once;
	// past it the server answers 429, so a loop of execs cannot exhaust
	// an agent.
	DefaultMaxStreams = 32
)

// Request is what the server asks of the agent when it opens a stream.
type Request struct {
	Kind    string   `json:"kind"`
	Command []string `json:"command,omitempty"`
	Port    int      `json:"port,omitempty"`
	// User is who asked, for the agent's own log line.
	User string `json:"user,omitempty"`
}

// Reply is the agent's answer to a Request; Error set means it refused
// the stream (and says why, in words an operator can act on).
type Reply struct {
	Error string `json:"error,omitempty"`
}

// ValidateCommand checks an exec's command line before it is sent.
func ValidateCommand(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("no command to run: give one after --, e.g. kubectl muster exec machine/NAME -- uptime")
	}
	size := 0
	for _, a := range argv {
		size += len(a) + 1
	}
	if size > MaxArgvBytes {
		return fmt.Errorf("the command line is %d bytes; at most %d are accepted: put long input in a file on the machine, or pipe it through a script", size, MaxArgvBytes)
	}
	return nil
}

// ValidatePort checks a port-forward's remote port.
func ValidatePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not a TCP port: give one from 1 to 65535 (the port on the machine's loopback that its agent allows with --allow-port)", s)
	}
	return p, nil
}

// DescribeCommand says what an exec ran, for its record (the server's log,
// the Machine's Event, the agent's log): the program's base name and how
// many arguments it had, never the arguments themselves. An exec's
// arguments are where a password goes (mysql -p..., curl -u ...), and
// viewers read Events. A program name that does not look like one (a
// whole command line in argv[0], a long string) is not shown either.
func DescribeCommand(argv []string) string {
	if len(argv) == 0 {
		return "no command"
	}
	prog := path.Base(argv[0])
	if !plainProgram(prog) {
		prog = fmt.Sprintf("a program named in %d bytes (not shown: it does not look like a program's name)", len(argv[0]))
	}
	switch n := len(argv) - 1; n {
	case 0:
		return prog + " with no arguments"
	case 1:
		return prog + " with 1 argument"
	default:
		return fmt.Sprintf("%s with %d arguments", prog, n)
	}
}

// plainProgram says whether a program's base name is short and made only
// of the characters program names are made of.
func plainProgram(name string) bool {
	if name == "" || len(name) > 64 || name == "." || name == "/" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r)) {
			return false
		}
	}
	return true
}

// writeHeader writes v as a length-prefixed JSON document: a stream's
// header must not be read past, since the stream's data follows it.
func writeHeader(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxHeaderBytes {
		return fmt.Errorf("stream header of %d bytes exceeds the limit of %d", len(b), MaxHeaderBytes)
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(append(n[:], b...)); err != nil {
		return err
	}
	return nil
}

func readHeader(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxHeaderBytes {
		return fmt.Errorf("stream header of %d bytes exceeds the limit of %d", size, MaxHeaderBytes)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Exec output is a sequence of frames: one byte of type, four of length,
// the payload. The same frames go from the agent to the server and on to
// the user, so stdout and stderr stay apart and the exit code comes last.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
	// FrameExit carries the exit code as a big-endian int32; it is the last frame.
	FrameExit byte = 3
)

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrameBytes {
		return fmt.Errorf("frame of %d bytes exceeds the limit of %d", len(payload), MaxFrameBytes)
	}
	hdr := [5]byte{typ}
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame into buf (grown as needed) and returns its
// type and payload.
func ReadFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	size := binary.BigEndian.Uint32(hdr[1:])
	if size > MaxFrameBytes {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds the limit of %d", size, MaxFrameBytes)
	}
	if cap(buf) < int(size) {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

// ExitFrame is the payload of FrameExit for code.
func ExitFrame(code int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(int32(code)))
	return b[:]
}

// ExitCode decodes a FrameExit payload.
func ExitCode(payload []byte) (int, error) {
	if len(payload) != 4 {
		return 0, fmt.Errorf("exit frame of %d bytes, want 4", len(payload))
	}
	return int(int32(binary.BigEndian.Uint32(payload))), nil
}

// ExecContentType is the media type of an exec's framed output.
const ExecContentType = "application/vnd.muster.exec-frames"

// keepAliveInterval is how often the agent pings the server through its
// tunnel.
const keepAliveInterval = 20 * time.Second

// muxConfig is yamux's configuration on both ends. The agent's keepalives
// find a tunnel whose connection died silently (a NAT dropping it) within
// a minute, so the agent reconnects; the server finds it by their absence
// (hubMuxConfig) and stops offering it.
func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = keepAliveInterval
	c.ConnectionWriteTimeout = 15 * time.Second
	c.StreamOpenTimeout = 15 * time.Second
	// A stream may have this much in flight before the other end reads:
	// the default 256 KiB held one port-forward to a fraction of what the
	// connection carries; memory is spent only while data waits.
	c.MaxStreamWindowSize = 1 << 20
	c.LogOutput = io.Discard
	c.Logger = nil
	return c
}

// silentTunnelTimeout is how long the server waits without a byte from
// an agent before it takes its tunnel for dead: two of its keepalives,
// and slack for a third that is late.
const silentTunnelTimeout = 2*keepAliveInterval + 5*time.Second

// hubMuxConfig is yamux's configuration on the server's end. It sends no
// keepalives of its own: the agent's arrive every keepAliveInterval, and
// their absence for silentTunnelTimeout ends the tunnel (serverConn), as
// an unanswered ping of the server's did. A keepalive is a goroutine per
// tunnel, for the life of the tunnel; watching for silence is a timer.
//
// Its backlog is the streams the hub lets a tunnel carry (maxStreams): it
// bounds the streams the server has opened and the agent not yet
// accepted, which the hub's own cap bounds already, and the agent's
// streams waiting to be accepted, which the server never accepts. The
// default of 256 was a 2 KiB channel per tunnel for nothing.
func hubMuxConfig(maxStreams int) *yamux.Config {
	c := muxConfig()
	c.EnableKeepAlive = false
	c.AcceptBacklog = maxStreams
	return c
}
