package workspace

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/codellm/codellm/internal/wire"
)

// The runtime command route (bridge-protocol §11.4): inside the docker-nsjail runtime container, codellm's
// runner serves POST /api/v2/workspace/execute for the worker's workspace commands. The workspace is the
// host directory the worker mounted at /mnt/workspace; the command runs in codellm's sandbox inside the
// container exactly as execute_command does on a host (§9.8). Field names, statuses and messages are the
// reference runner's.
const (
	PathCommandRoute = "/api/v2/workspace/execute"
	TokenHeader      = "X-LibreChat-Workspace-Token"
	// ContainerRoot is where the worker mounts the workspace in the runtime container.
	ContainerRoot = "/mnt/workspace"
	// Environment of the runtime container that enables the route.
	EnvRouteEnabled = "SANDBOX_EXTERNAL_WORKSPACE_ENABLED"
	EnvRouteRoot    = "SANDBOX_EXTERNAL_WORKSPACE_ROOT"
	EnvRouteToken   = "SANDBOX_EXTERNAL_WORKSPACE_TOKEN"

	minRouteToken = 32 // bytes: a capability, never a guessable word
	maxRouteBody  = 256 << 10
)

// commandBody is the route's request: exactly these keys (§11.4).
type commandBody struct {
	Command        string  `json:"command"`
	Cwd            *string `json:"cwd,omitempty"`
	TimeoutMs      *int    `json:"timeoutMs,omitempty"`
	MaxOutputBytes *int    `json:"maxOutputBytes,omitempty"`
}

// CommandRoute serves the route for ws with the capability token. A nil ws (the route is not enabled)
// answers 404, as does a token shorter than 32 bytes: it would guard nothing. The runner binds itself to
// the first runtime session that calls it; another session is 409 session_workspace_dirty.
func CommandRoute(ws *Workspace, token string) http.HandlerFunc {
	var mu sync.Mutex
	bound := ""
	return func(w http.ResponseWriter, r *http.Request) {
		if ws == nil || len(token) < minRouteToken {
			routeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
			return
		}
		got := r.Header.Get(TokenHeader)
		if len(got) != len(token) || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			routeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Unauthorized"})
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			routeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"message": "requests must be of type application/json"})
			return
		}
		sids := r.Header.Values(wire.RuntimeSessionHeader)
		if len(sids) != 1 || strings.TrimSpace(sids[0]) == "" || len(sids[0]) > 256 {
			routeJSON(w, http.StatusBadRequest, map[string]string{"message": wire.RuntimeSessionHeader + " is required"})
			return
		}
		mu.Lock()
		if bound == "" {
			bound = sids[0]
		}
		other := bound != sids[0]
		mu.Unlock()
		if other {
			routeJSON(w, http.StatusConflict, map[string]string{"error": wire.CodeSessionWorkspaceDirty,
				"message": "Runner is bound to a different runtime session"})
			return
		}
		serveCommand(ws, w, r)
	}
}

// serveCommand decodes the body strictly and runs it: a request the workspace refuses before running
// (INVALID_REQUEST, INVALID_PATH) is 400 {message}; any other failure is 500 sandbox_execution_failed.
func serveCommand(ws *Workspace, w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRouteBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			routeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"message": "request entity too large"})
			return
		}
		routeJSON(w, http.StatusBadRequest, map[string]string{"message": "cannot read the request body"})
		return
	}
	var b commandBody
	if err := decodeStrict(raw, &b); err != nil {
		routeJSON(w, http.StatusBadRequest, map[string]string{"message": "Command request is invalid: " + err.(*Error).Message})
		return
	}
	res, err := ws.ExecuteCommand(r.Context(), &ExecuteCommandRequest{Command: b.Command, Cwd: b.Cwd,
		TimeoutMs: b.TimeoutMs, MaxOutputBytes: b.MaxOutputBytes})
	if err != nil {
		e := asError(err, CodeCommandUnavailable, "command failed")
		if !e.MayHaveCommitted && (e.Code == CodeInvalidRequest || e.Code == CodeInvalidPath) {
			routeJSON(w, http.StatusBadRequest, map[string]string{"message": e.Message})
			return
		}
		routeJSON(w, http.StatusInternalServerError, map[string]string{"error": "sandbox_execution_failed",
			"message": "Sandboxed workspace command failed: " + string(e.Code)})
		return
	}
	routeJSON(w, http.StatusOK, res)
}

func routeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
