package master

import (
	"context"
	"net/http"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// The console's auto-flex section: GET /api/auto (role read) answers the
// auto-flex mode, the manual-override pause, the dry-run proposal, the
// last step, the rules with their signals, and the scheduled changes, in
// the shape `willow flex auto status --json` prints (AutoView,
// autoflex_view.go).

// consoleAuto adds the auto-flex endpoint to the console's mux.
func (s *Server) consoleAuto(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/auto", s.consoleAuth(auth.RoleRead, s.apiAuto))
}

func (s *Server) apiAuto(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	st, err := s.GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	l, err := s.ListSchedules(ctx, &willowv1.ListSchedulesRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	writeConsoleJSON(w, http.StatusOK, NewAutoView(st, l.GetSchedules()))
}
