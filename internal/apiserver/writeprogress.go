package apiserver

import (
	"net"
	"sync"
	"time"
)

// WriteProgressTimeout is the longest one write to a client's connection
// may wait for the client to read. A connection whose client stops
// reading is closed after it, with every request on it: over HTTP/2 a
// stream's own write deadline (what paces a download, internal/install)
// cannot end a handler while the connection under it is stuck, and the
// server sets no other bound on writes. A client reading as slowly as
// 300 bytes a second still moves every write (at most one TLS record,
// 16 KiB) within it.
const WriteProgressTimeout = time.Minute

// withWriteProgress bounds every write on l's connections by timeout,
// keeping any earlier deadline their users set.
func withWriteProgress(l net.Listener, timeout time.Duration) net.Listener {
	return progressListener{Listener: l, timeout: timeout}
}

type progressListener struct {
	net.Listener
	timeout time.Duration
}

func (l progressListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &progressConn{Conn: c, timeout: l.timeout}, nil
}

// progressConn arms a write deadline before every write: the sooner of
// timeout from now and the deadline its user set.
type progressConn struct {
	net.Conn
	timeout time.Duration

	mu       sync.Mutex
	deadline time.Time // the user's, zero for none
}

func (c *progressConn) arm() error {
	d := time.Now().Add(c.timeout)
	if !c.deadline.IsZero() && c.deadline.Before(d) {
		d = c.deadline
	}
	return c.Conn.SetWriteDeadline(d)
}

func (c *progressConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	err := c.arm()
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *progressConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.arm()
}

func (c *progressConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}
