package hub

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// toolErrorStatus maps a workspace rejection's errorCode to the client
// status of §13.5.
func toolErrorStatus(code string) int {
	switch code {
	case "INVALID_PATH", "INVALID_REQUEST":
		return http.StatusBadRequest
	case "READ_LIMIT_EXCEEDED", "WRITE_LIMIT_EXCEEDED":
		return http.StatusRequestEntityTooLarge
	case "WRITE_DISABLED", "COMMAND_DISABLED":
		return http.StatusForbidden
	case "EDIT_CONFLICT":
		return http.StatusConflict
	}
	if strings.HasSuffix(code, "_TIMEOUT") {
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}

func writeToolError(w http.ResponseWriter, status int, msg, code string, retryAfter int) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	o := &bridge.Object{}
	o.Set("error", msg)
	if code != "" {
		o.Set("code", code)
	}
	b, _ := bridge.Canonical(o)
	writeJSON(w, status, b)
}

// handleWorkspaceTools is POST /v1/workspace-tools: one §9 request on a named
// worker, checked against what that worker negotiated, with the result
// re-validated before it reaches the client (§7.3 steps 1 and 5, §13.5).
func (h *Hub) handleWorkspaceTools(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody+(1<<20)) // room for a 1 MiB write_file
	if err != nil {
		writeToolError(w, http.StatusRequestEntityTooLarge, "Request body is too large", string(bridge.CodeBodyTooLarge), 0)
		return
	}
	body, err := bridge.ParseObject(raw)
	if err != nil {
		writeToolError(w, http.StatusBadRequest, "Body must be a JSON object {workerId, request}", string(bridge.CodeAssignmentInvalid), 0)
		return
	}
	wv, _ := body.Get("workerId")
	workerID, _ := wv.(string)
	rv, _ := body.Get("request")
	reqObj, _ := rv.(*bridge.Object)
	if !bridge.ValidWorkerID(workerID) || reqObj == nil {
		writeToolError(w, http.StatusBadRequest, "Body must be a JSON object {workerId, request}", string(bridge.CodeAssignmentInvalid), 0)
		return
	}
	if pin, ce := h.pinnedWorker(r, key); ce != nil || (pin != "" && pin != workerID) {
		if ce == nil {
			status := http.StatusBadRequest
			if key.signed {
				status = http.StatusForbidden // the token pins another worker
			}
			ce = pinError(status, "workerId "+quoteClaim(workerID)+" is not the pinned worker "+quoteClaim(pin))
		}
		writeToolError(w, ce.status, ce.message, "", 0)
		return
	}
	req, err := bridge.ValidateWorkspaceRequest(reqObj)
	if err != nil {
		writeToolError(w, http.StatusBadRequest, "Invalid workspace tool request", string(bridge.CodeAssignmentInvalid), 0)
		return
	}
	// The worker is up but did not advertise this operation (or mode, feature, workspace): retrying
	// cannot help, unlike the 503 of a worker that went away, so the status says "do not retry".
	st := toolStatuses{mismatch: http.StatusBadRequest, rejected: toolErrorStatus}
	if result := h.runWorkspaceTool(w, r, key, workerID, reqObj, req, st); result != nil {
		resp := &bridge.Object{}
		resp.Set("result", result)
		b, _ := bridge.Canonical(resp)
		writeJSON(w, http.StatusOK, b)
	}
}

// toolStatuses are how a workspace route answers a worker that does not offer the request and a
// worker's rejection (by its errorCode): the two places where the routes' statuses differ.
type toolStatuses struct {
	mismatch int
	rejected func(code string) int
}

// runWorkspaceTool dispatches a validated §9 request to workerID and returns the worker's result,
// re-validated; on any failure it has answered the client (in {error, code}) and returns nil.
func (h *Hub) runWorkspaceTool(w http.ResponseWriter, r *http.Request, key *ClientKey, workerID string, reqObj *bridge.Object,
	req *bridge.WorkspaceRequest, st toolStatuses) *bridge.Object {
	budget := h.cfg.ExecTimeout
	if req.Operation == "execute_command" {
		// The command's own limit plus time to deliver and settle it; a hub deadline shorter than the
		// command's limit would expire a command the worker is still allowed to run.
		ms, _ := reqObj.Get("timeoutMs")
		n, _ := ms.(float64)
		budget = max(budget, time.Duration(max(n, 30000))*time.Millisecond+5*time.Second)
	}
	deadline, err := h.deadline(r, budget)
	if err != nil {
		writeToolError(w, http.StatusBadRequest, err.Error(), "", 0)
		return nil
	}
	canonical, _ := bridge.Canonical(reqObj)
	d := &dispatchReq{
		caller: key, kind: bridge.KindWorkspaceTool, request: canonical, pinned: workerID, deadline: deadline,
		accept: func(c *bridge.Capabilities) bool { return c.AllowsRequest(req) },
	}
	out, err := h.dispatch(r.Context(), d)
	if errors.Is(err, bridge.ErrWorkerMismatch) {
		writeToolError(w, st.mismatch, "The worker does not offer "+req.Operation+" with these options on workspace "+req.WorkspaceID,
			string(bridge.CodeWorkerMismatch), 0)
		return nil
	}
	if err != nil {
		ce := h.fail(err)
		code := ce.code
		var be *bridge.Error
		if errors.As(err, &be) && be.Code != "" {
			code = string(be.Code)
		}
		writeToolError(w, ce.status, ce.message, code, ce.retryAfter)
		return nil
	}
	if out.status != bridge.StatusFulfilled {
		writeToolError(w, st.rejected(out.errCode), out.errMsg, out.errCode, 0)
		return nil
	}
	afterPath := out.caps.WorkspaceTools != nil && len(out.caps.WorkspaceTools.ListFileFeatures) > 0
	if !bridge.ValidateWorkspaceResult(req, out.result, afterPath) {
		// The settlement itself stays accepted; only the client sees this.
		writeToolError(w, http.StatusBadGateway, "The worker returned an invalid workspace tool result", string(bridge.CodeResultInvalid), 0)
		return nil
	}
	return out.result
}

// handleWorkspaceExecute is POST /v1/workspace-tools/execute, the route LibreChat's workspace tools call
// (@librechat/agents executeWorkspaceTool): the body is the bare §9 request, the worker is named by
// X-LibreChat-Code-Worker-ID, and the answer is the Code API's: the result itself on 200, {error} or
// {error, code} otherwise, with its statuses (service/src/bridge/workspace-router.ts).
func (h *Hub) handleWorkspaceExecute(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody+(1<<20)) // room for a 1 MiB write_file
	if err != nil {
		writeToolError(w, http.StatusRequestEntityTooLarge, "Request body is too large", string(bridge.CodeBodyTooLarge), 0)
		return
	}
	reqObj, err := bridge.ParseObject(raw)
	var req *bridge.WorkspaceRequest
	if err == nil {
		req, err = bridge.ValidateWorkspaceRequest(reqObj)
	}
	if err != nil {
		writeToolError(w, http.StatusBadRequest, "Invalid workspace tool request", "", 0)
		return
	}
	workerID, status, msg := h.workspaceWorker(r, key, req)
	if status != 0 {
		writeToolError(w, status, msg, "", 0)
		return
	}
	st := toolStatuses{mismatch: http.StatusConflict, rejected: upstreamToolStatus}
	if result := h.runWorkspaceTool(w, r, key, workerID, reqObj, req, st); result != nil {
		b, _ := bridge.Canonical(result)
		writeJSON(w, http.StatusOK, b)
	}
}

// workspaceWorker picks the worker of a workspace tool call: the pinned one (pinnedWorker: the
// X-LibreChat-Code-Worker-ID header, a signed token's code_worker_id), else the only online worker this
// caller may use that offers the request. Several such workers are refused rather than guessed between (a
// write must not land in another machine's workspace of the same name). A non-zero status is the refusal,
// msg its error.
func (h *Hub) workspaceWorker(r *http.Request, key *ClientKey, req *bridge.WorkspaceRequest) (id string, status int, msg string) {
	id, ce := h.pinnedWorker(r, key)
	if ce != nil {
		return "", ce.status, ce.message
	}
	if id != "" {
		return id, 0, ""
	}
	all, err := h.store.Workers(r.Context())
	if err != nil {
		ce := h.fail(err)
		return "", ce.status, ce.message
	}
	var ids []string
	for _, st := range all {
		if st.Ready && st.Registration != nil && h.admits(st.Binding, key) && st.Registration.Capabilities.AllowsRequest(req) {
			ids = append(ids, st.WorkerID)
		}
	}
	switch len(ids) {
	case 0:
		return "", http.StatusServiceUnavailable, "No code bridge worker was selected: no online worker offers " + req.Operation +
			" on workspace " + req.WorkspaceID + "; name one in " + HeaderLibreChatWorker
	case 1:
		return ids[0], 0, ""
	}
	return "", http.StatusBadRequest, "Workers " + strings.Join(ids, ", ") + " all offer workspace " + req.WorkspaceID +
		"; name one in " + HeaderLibreChatWorker
}

// upstreamToolStatus maps a workspace rejection's errorCode to the Code API's status for it: 422 unless
// the code says a limit, a conflict, a disabled feature, a timeout or an unavailable tool.
func upstreamToolStatus(code string) int {
	switch code {
	case "SEARCH_TIMEOUT", "LIST_TIMEOUT", "COMMAND_TIMEOUT":
		return http.StatusGatewayTimeout
	case "SEARCH_UNAVAILABLE", "LIST_UNAVAILABLE", "COMMAND_UNAVAILABLE", "WRITE_UNAVAILABLE":
		return http.StatusServiceUnavailable
	case "WRITE_DISABLED", "COMMAND_DISABLED":
		return http.StatusForbidden
	case "WRITE_LIMIT_EXCEEDED":
		return http.StatusRequestEntityTooLarge
	case "EDIT_CONFLICT":
		return http.StatusConflict
	}
	return http.StatusUnprocessableEntity
}
