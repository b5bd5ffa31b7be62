package edgecache

import (
	"io"
	"net"
	"time"
)

// httpSendTimeout (a variable for tests) is how long a response may go without the client
// taking any of its bytes before the edge closes the connection, as
// nginx's send_timeout (60 s by default): it runs between two writes
// that made progress, not over the whole response, so a slow phone
// fetching a large video is not cut while it reads, and a client that
// asks and never reads (a zero TCP window, which Linux keeps probing
// without end) does not hold a goroutine and a descriptor for ever.
var httpSendTimeout = 60 * time.Second

// deadliner is a connection whose write deadline can be set.
type deadliner interface {
	SetWriteDeadline(time.Time) error
}

// sendDeadline keeps a connection's write deadline the send timeout
// after the latest progress. Setting a deadline is a timer change, so
// arm skips it when one was set within the slack (a second, or a
// sixteenth of the timeout if less): the deadline in force is between
// timeout-slack and timeout after the last progress.
type sendDeadline struct {
	timeout time.Duration
	armed   time.Time // when the deadline was last set; zero: none set
	mark    int       // the bytes sent when waiting last armed it (-1: not yet in this response)
}

// waiting arms c's deadline before a send waits for the socket to drain,
// when bytes went since waiting last armed it; else the deadline from
// that progress holds, and the wait ends with os.ErrDeadlineExceeded
// when it passes. sent is the response's bytes sent so far.
func (d *sendDeadline) waiting(c deadliner, sent int) {
	if c != nil && sent != d.mark {
		d.arm(c, time.Now())
		d.mark = sent
	}
}

// arm sets c's write deadline the timeout from now, unless one set
// within the slack is in force.
func (d *sendDeadline) arm(c deadliner, now time.Time) {
	if d.timeout <= 0 || !d.armed.IsZero() && now.Sub(d.armed) < min(time.Second, d.timeout/16) {
		return
	}
	c.SetWriteDeadline(now.Add(d.timeout))
	d.armed = now
}

// clear removes a deadline arm set, so that a later write (a raw one
// checks the deadline before it starts) does not find it expired.
func (d *sendDeadline) clear(c deadliner) {
	if !d.armed.IsZero() {
		c.SetWriteDeadline(time.Time{})
		d.armed = time.Time{}
	}
}

// sendPieceBytes is how much of a write goes under one arming of the
// deadline on the net/http path (handoffConn): larger writes are cut,
// so that a slow reader of a large body is judged by its progress.
const sendPieceBytes = 256 << 10

// Write writes p in pieces, each after arming the send deadline.
func (c *handoffConn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c.dl.arm(c.Conn, time.Now())
		m, err := c.Conn.Write(p[n:min(len(p), n+sendPieceBytes)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadFrom keeps the connection's ReadFrom (counted, sendfile) for a
// disk-tier body, whose WriteTo arms the deadline on its own progress;
// anything else is copied through Write, which does.
func (c *handoffConn) ReadFrom(r io.Reader) (int64, error) {
	if fb, ok := r.(*fileBody); ok {
		if rf, ok := c.Conn.(io.ReaderFrom); ok {
			c.dl.arm(c.Conn, time.Now())
			return rf.ReadFrom(fb)
		}
	}
	return io.Copy(writerOnly{c}, r)
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// sendTimeoutListener gives net/http its connections as handoffConns
// when no hit path accepts them (Config.NoHitPath), so that their
// writes have the send timeout too.
type sendTimeoutListener struct{ net.Listener }

func (l sendTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handoffConn{Conn: c, dl: sendDeadline{timeout: httpSendTimeout}}, nil
}
