package upload

import (
	"sync"
	"time"

	"google.golang.org/grpc/peer"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Defaults of the limits on what one caller can hold (Config).
const (
	DefaultChunkIdleTimeout  = 30 * time.Second
	DefaultMaxStreamsPerConn = 16
	DefaultMaxStreamsPerUser = 8
	DefaultMaxStagedPerConn  = 64
	DefaultMaxStagedPerUser  = 32
)

// Length limits of the string fields of an upload (bytes).
const (
	MaxUploadIDLen    = 128
	MaxUserLen        = 128
	MaxFilenameLen    = 255
	MaxContentTypeLen = 127
)

// checkLen refuses a string field over max bytes.
func checkLen(field, v string, max int) error {
	if len(v) > max {
		return fail(ReasonFieldTooLong, "%s is %d bytes, over the limit of %d", field, len(v), max)
	}
	return nil
}

// checkIDs bounds the upload ID and user of a Chunk, Status or Commit.
func checkIDs(uploadID, user string) error {
	if err := checkLen("upload_id", uploadID, MaxUploadIDLen); err != nil {
		return err
	}
	return checkLen("user", user, MaxUserLen)
}

// holdings counts what callers hold: open Chunks streams and staged,
// uncommitted uploads, per connection ("c:" + peer address) and per user
// ("u:" + user). Staged uploads are counted from their Begin on this
// process; uploads staged before a restart are not counted.
type holdings struct {
	mu      sync.Mutex                 // guards every field
	streams map[string]int             // holder -> open streams
	staged  map[string]map[string]bool // holder -> keys
	holders map[string][]string        // key -> its holders
}

func newHoldings() *holdings {
	return &holdings{streams: map[string]int{}, staged: map[string]map[string]bool{}, holders: map[string][]string{}}
}

// connOf names the connection of a call: its peer address.
func connOf(p *peer.Peer, ok bool) string {
	if !ok || p.Addr == nil {
		return ""
	}
	return "c:" + p.Addr.String()
}

// acquireStream takes one stream for holder if it has fewer than max, and
// returns the release.
func (h *holdings) acquireStream(holder string, max int, what string) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams[holder] >= max {
		return nil, fail(ReasonTooManyStreams, "%s already has %d Chunks streams open", what, max)
	}
	h.streams[holder]++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.streams[holder]--; h.streams[holder] <= 0 {
			delete(h.streams, holder)
		}
	}, nil
}

// addStaged counts a new staged upload key for its connection and user,
// or refuses it when either already holds its limit.
func (h *holdings) addStaged(key, conn, user string, maxConn, maxUser int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.holders[key]; ok {
		return nil
	}
	type lim struct {
		holder, what string
		max          int
	}
	lims := []lim{{"u:" + user, "user " + user, maxUser}}
	if conn != "" {
		lims = append(lims, lim{conn, "this connection", maxConn})
	}
	for _, l := range lims {
		if len(h.staged[l.holder]) >= l.max {
			return fail(ReasonTooManyUploads,
				"%s already has %d uploads begun and not committed: commit or let them expire", l.what, l.max)
		}
	}
	for _, l := range lims {
		if h.staged[l.holder] == nil {
			h.staged[l.holder] = map[string]bool{}
		}
		h.staged[l.holder][key] = true
		h.holders[key] = append(h.holders[key], l.holder)
	}
	return nil
}

// dropStaged forgets key (committed, cancelled or expired).
func (h *holdings) dropStaged(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, holder := range h.holders[key] {
		delete(h.staged[holder], key)
		if len(h.staged[holder]) == 0 {
			delete(h.staged, holder)
		}
	}
	delete(h.holders, key)
}

// chunkStream is a Chunks stream under the caller limits: each Recv waits
// at most the idle timeout, and the user of each chunk takes one of the
// user's streams for the rest of the stream. One receiving goroutine reads
// ahead (chunkReadAhead messages), so the next chunk is received and
// unmarshalled while the handler writes and hashes this one.
type chunkStream struct {
	willowv1.Upload_ChunksServer
	s        *Server
	idle     time.Duration
	users    map[string]bool
	releases []func()
	recvd    chan chunkResult // nil until the first Recv starts the reader
	stop     chan struct{}    // closed by done: the reader gives up
	timer    *time.Timer
}

type chunkResult struct {
	c   *chunkMsg
	err error
}

// chunkReadAhead is how many received chunks wait for the handler (each
// at most MaxChunkBytes).
const chunkReadAhead = 1

// limitChunks applies the caller limits to a Chunks stream: the
// connection's stream count now, the users' as their chunks arrive. Call
// done when the stream ends.
func (s *Server) limitChunks(stream willowv1.Upload_ChunksServer) (cs *chunkStream, done func(), err error) {
	cs = &chunkStream{Upload_ChunksServer: stream, s: s, idle: s.cfg.ChunkIdleTimeout, users: map[string]bool{}}
	cs.stop = make(chan struct{})
	done = func() {
		close(cs.stop)
		if cs.timer != nil {
			cs.timer.Stop()
		}
		for _, r := range cs.releases {
			r()
		}
	}
	if c := connOf(peer.FromContext(stream.Context())); c != "" {
		r, err := s.hold.acquireStream(c, s.cfg.MaxStreamsPerConn, "this connection")
		if err != nil {
			return nil, nil, err
		}
		cs.releases = append(cs.releases, r)
	}
	return cs, done, nil
}

// Recv receives the next chunk, or fails with DEADLINE_EXCEEDED
// idle_timeout when none comes within the idle timeout. A stream given up
// on is ended by the handler's return, which also ends the receive left
// waiting. The chunk's Data may alias gRPC's receive buffer (codec.go):
// release the chunk once its data is written.
func (cs *chunkStream) Recv() (*chunkMsg, error) {
	if cs.recvd == nil {
		cs.recvd = make(chan chunkResult, chunkReadAhead)
		go cs.readAhead()
		cs.timer = time.NewTimer(cs.idle)
	} else {
		cs.timer.Reset(cs.idle)
	}
	var r chunkResult
	select {
	case r = <-cs.recvd:
		cs.timer.Stop() // go >= 1.23 timers: no stale tick after Stop or Reset
	case <-cs.timer.C:
		return nil, fail(ReasonIdleTimeout, "Chunks stream sent nothing for %s", cs.idle)
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := checkIDs(r.c.GetUploadId(), r.c.GetUser()); err != nil {
		r.c.release()
		return nil, err
	}
	user := r.c.GetUser()
	if c, ok := auth.FromContext(cs.Context()); ok && c.Class == auth.Client {
		user = c.User
	}
	if user != "" && !cs.users[user] {
		rel, err := cs.s.hold.acquireStream("u:"+user, cs.s.cfg.MaxStreamsPerUser, "user "+user)
		if err != nil {
			r.c.release()
			return nil, err
		}
		cs.users[user] = true
		cs.releases = append(cs.releases, rel)
	}
	return r.c, nil
}

// readAhead receives the stream's messages into cs.recvd until the first
// error (io.EOF included) or until the handler is done.
func (cs *chunkStream) readAhead() {
	for {
		c := new(chunkMsg)
		err := cs.Upload_ChunksServer.RecvMsg(c)
		if err != nil {
			c.release()
			c = nil
		}
		select {
		case cs.recvd <- chunkResult{c, err}:
		case <-cs.stop:
			c.release()
			return
		}
		if err != nil {
			return
		}
	}
}
