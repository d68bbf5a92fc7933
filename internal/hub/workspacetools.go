package hub

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

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
	deadline, err := h.deadline(r, h.cfg.ExecTimeout)
	if err != nil {
		writeToolError(w, http.StatusBadRequest, err.Error(), "", 0)
		return
	}
	canonical, _ := bridge.Canonical(reqObj)
	d := &dispatchReq{
		caller: key, kind: bridge.KindWorkspaceTool, request: canonical, pinned: workerID, deadline: deadline,
		accept: func(c *bridge.Capabilities) bool { return c.AllowsRequest(req) },
	}
	out, err := h.dispatch(r.Context(), d)
	if errors.Is(err, bridge.ErrWorkerMismatch) {
		// The worker is up but did not advertise this operation (or mode, feature, workspace): retrying
		// cannot help, unlike the 503 of a worker that went away.
		// The protocol's code is kept; the status says "do not retry".
		writeToolError(w, http.StatusBadRequest, "The worker does not offer "+req.Operation+" with these options on workspace "+req.WorkspaceID,
			string(bridge.CodeWorkerMismatch), 0)
		return
	}
	if err != nil {
		ce := h.fail(err)
		code := ce.code
		var be *bridge.Error
		if errors.As(err, &be) && be.Code != "" {
			code = string(be.Code)
		}
		writeToolError(w, ce.status, ce.message, code, ce.retryAfter)
		return
	}
	if out.status != bridge.StatusFulfilled {
		writeToolError(w, toolErrorStatus(out.errCode), out.errMsg, out.errCode, 0)
		return
	}
	afterPath := out.caps.WorkspaceTools != nil && len(out.caps.WorkspaceTools.ListFileFeatures) > 0
	if !bridge.ValidateWorkspaceResult(req, out.result, afterPath) {
		// The settlement itself stays accepted; only the client sees this.
		writeToolError(w, http.StatusBadGateway, "The worker returned an invalid workspace tool result", string(bridge.CodeResultInvalid), 0)
		return
	}
	resp := &bridge.Object{}
	resp.Set("result", out.result)
	b, _ := bridge.Canonical(resp)
	writeJSON(w, http.StatusOK, b)
}
