package master

import (
	"context"
	_ "embed"
	"net/http"
	"sort"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// The console's upload page: a file picker that uploads with tus-js-client
// (its browser build, vendored from the npm package pinned in
// web/package.json) to an upload front's tus endpoint, shows progress,
// resumes an interrupted upload after a reload (tus-js-client keeps the
// upload URL in localStorage), and shows the photo from an edge cache when
// done. It needs the user's upload token (`willow token`); the fronts must
// allow the console's origin (upload.HTTPConfig.CORSOrigins).
//
//	GET /console/upload      the page
//	GET /console/tus.min.js  tus-js-client's browser build
//	GET /api/endpoints       {"upload_http": [{"region","url"}], "edge_http": [...]}

//go:embed static/upload.html
var uploadHTML []byte

// TusJS is tus-js-client's browser build as the console serves it, copied
// from web/node_modules/tus-js-client/dist/tus.min.js (a test checks they
// are the same bytes).
//
//go:embed static/tus.min.js
var TusJS []byte

func (s *Server) uploadPage(mux *http.ServeMux) {
	mux.HandleFunc("GET /console/upload", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(uploadHTML)
	})
	mux.HandleFunc("GET /console/tus.min.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Write(TusJS)
	})
	mux.HandleFunc("GET /api/endpoints", s.apiEndpoints)
}

// consoleEndpoint is one public HTTP endpoint of a region.
type consoleEndpoint struct {
	Region string `json:"region"`
	URL    string `json:"url"`
}

// apiEndpoints lists the healthy upload fronts' tus endpoints and edge
// caches' HTTP base URLs, as the nodes advertise them.
func (s *Server) apiEndpoints(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	resp, err := s.ListNodes(ctx, &willowv1.ListNodesRequest{})
	if err != nil {
		writeConsoleJSON(w, http.StatusServiceUnavailable, map[string]string{"error": rpcstatus.Line(err)})
		return
	}
	out := struct {
		Upload []consoleEndpoint `json:"upload_http"`
		Edge   []consoleEndpoint `json:"edge_http"`
	}{Upload: []consoleEndpoint{}, Edge: []consoleEndpoint{}}
	for _, ns := range resp.GetNodes() {
		n := ns.GetNode()
		if ns.GetState() != "healthy" || n.GetHttpAddr() == "" {
			continue
		}
		switch n.GetRole() {
		case "upload":
			out.Upload = append(out.Upload, consoleEndpoint{Region: n.GetRegion(), URL: "http://" + n.GetHttpAddr() + "/files/"})
		case "edgecache":
			out.Edge = append(out.Edge, consoleEndpoint{Region: n.GetRegion(), URL: "http://" + n.GetHttpAddr()})
		}
	}
	for _, l := range [][]consoleEndpoint{out.Upload, out.Edge} {
		sort.Slice(l, func(i, j int) bool { return l[i].Region+l[i].URL < l[j].Region+l[j].URL })
	}
	writeConsoleJSON(w, http.StatusOK, out)
}
