package master

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	willowv1 "willow/proto/willow/v1"
)

// Watch fan-out. A flex change wakes every Watch stream at once (N = 5000
// in BenchmarkFleet): each used to take the flex mutex to read the new
// state, the server mutex for its drills, and marshal and compress
// (zstd, as nodes ask) the same event for itself. Now the streams read
// one watchState published without a lock, and the event of a version is
// encoded once per wire format (codec and compressor) and the encoded
// bytes shared by every stream of that format (grpc.PreparedMsg); only a
// node with drills of its own gets an event encoded for it alone.

// watchState is one flex version as Watch streams follow it. It is
// immutable once published, but for enc, filled as streams need it.
type watchState struct {
	st      *willowv1.FlexState
	changed <-chan struct{} // closed when the next version is published
	enc     sync.Map        // wire format -> *watchEncoding
}

// watchEncoding is a version's event encoded for one wire format.
type watchEncoding struct {
	once sync.Once
	msg  *grpc.PreparedMsg
	err  error
}

// publishWatch makes st, with changed, what Watch streams send. The
// caller holds flexMu (the order of versions is install's).
func (s *Server) publishWatch(st *willowv1.FlexState, changed <-chan struct{}) {
	s.watch.Store(&watchState{st: st, changed: changed})
}

// wireFormat names the encoding a server stream sends with (its codec's
// content subtype and its compressor), or reports false when the
// transport does not tell (then the stream encodes its own events).
// A stream's compressor is the one its client sent with (grpc-go's
// default; Watch does not change it), which is what PreparedMsg.Encode
// uses too.
func wireFormat(ctx context.Context) (string, bool) {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(interface {
		ContentSubtype() string
		SendCompress() string
	})
	if !ok {
		return "", false
	}
	return ts.ContentSubtype() + "/" + ts.SendCompress(), true
}

// sendWatch sends stream the event of ws for a node with drills.
func sendWatch(stream grpc.ServerStream, ws *watchState, drills []*willowv1.Drill) error {
	ev := &willowv1.WatchEvent{Flex: ws.st, Drills: drills}
	format, ok := wireFormat(stream.Context())
	if len(drills) > 0 || !ok {
		return stream.SendMsg(ev)
	}
	v, found := ws.enc.Load(format)
	if !found {
		v, _ = ws.enc.LoadOrStore(format, &watchEncoding{})
	}
	e := v.(*watchEncoding)
	e.once.Do(func() {
		e.msg = &grpc.PreparedMsg{}
		e.err = e.msg.Encode(stream, ev)
	})
	if e.err != nil {
		return stream.SendMsg(ev)
	}
	return stream.SendMsg(e.msg)
}

// Watch streams the flex state: the current state first, then every new
// version, until the client goes away. Each event also carries the node's
// active drills, when it has any (heartbeats carry them too).
func (s *Server) Watch(req *willowv1.WatchRequest, stream grpc.ServerStreamingServer[willowv1.WatchEvent]) error {
	ws := s.watch.Load()
	if err := sendWatch(stream, ws, s.drillsFor(req.GetNodeId(), "", s.now())); err != nil {
		return err
	}
	sent := ws.st.GetVersion()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-ws.changed:
		}
		ws = s.watch.Load()
		if ws.st.GetVersion() == sent {
			continue
		}
		if err := sendWatch(stream, ws, s.drillsFor(req.GetNodeId(), "", s.now())); err != nil {
			return err
		}
		sent = ws.st.GetVersion()
	}
}
