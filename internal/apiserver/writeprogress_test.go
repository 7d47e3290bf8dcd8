package apiserver

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestWriteProgress: a write to a client that never reads fails after
// the timeout instead of waiting forever; a deadline the conn's user set
// sooner still holds; and a client that reads is never cut.
func TestWriteProgress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pl := withWriteProgress(l, 300*time.Millisecond)
	stalled := func(t *testing.T, userDeadline time.Duration, want time.Duration) {
		t.Helper()
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close() // never read
		conn, err := pl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if userDeadline > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(userDeadline))
		}
		start := time.Now()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				took := time.Since(start)
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("write to a client that does not read: %v, want a deadline", err)
				}
				// The socket buffers fill first, within milliseconds.
				if took < want || took > want+2*time.Second {
					t.Fatalf("write to a client that does not read failed after %v, want about %v", took, want)
				}
				return
			}
			if time.Since(start) > 10*time.Second {
				t.Fatal("writes to a client that does not read never failed")
			}
		}
	}
	t.Run("client stops reading", func(t *testing.T) { stalled(t, 0, 300*time.Millisecond) })
	t.Run("sooner deadline of the user", func(t *testing.T) { stalled(t, 100*time.Millisecond, 100*time.Millisecond) })
	t.Run("reading client never cut", func(t *testing.T) {
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := client.Read(buf); err != nil {
					return
				}
			}
		}()
		conn, err := pl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		chunk := make([]byte, 64<<10)
		// Longer in all than the timeout: each write moves.
		for start := time.Now(); time.Since(start) < time.Second; {
			if _, err := conn.Write(chunk); err != nil {
				t.Fatalf("write to a reading client: %v", err)
			}
		}
	})
}
