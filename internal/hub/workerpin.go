package hub

import (
	"net/http"
	"strings"

	"github.com/codellm/codellm/internal/bridge"
)

// Worker pinning (issue 40 item 3). LibreChat names the worker a user's stateful environment is attached
// to in X-LibreChat-Code-Worker-ID, and with signed tokens also in the token's code_worker_id claim; the
// Code API takes the header only when it equals that claim (service/src/bridge/selection.ts). codellm's
// own header, X-Codellm-Worker-Id, pins the same way.

// Headers that pin a request to one worker.
const (
	HeaderLibreChatWorker = "X-LibreChat-Code-Worker-ID"
	HeaderCodellmWorker   = "X-Codellm-Worker-Id"
)

// pinError is a refused pin, in the statuses of the Code API's BridgeWorkerSelectionError: 400 for a
// malformed ID or headers that disagree, 403 for a pin the caller may not make.
func pinError(status int, msg string) *clientError {
	code := "invalid_request"
	if status == http.StatusForbidden {
		code = "forbidden"
	}
	return &clientError{status: status, code: code, message: msg}
}

// requestedWorker is the worker r names in its pin headers ("" for none).
func requestedWorker(r *http.Request) (string, *clientError) {
	lc := strings.TrimSpace(r.Header.Get(HeaderLibreChatWorker))
	own := strings.TrimSpace(r.Header.Get(HeaderCodellmWorker))
	if lc != "" && own != "" && lc != own {
		return "", pinError(http.StatusBadRequest, HeaderLibreChatWorker+" and "+HeaderCodellmWorker+" name different workers; send one")
	}
	if lc != "" {
		return lc, nil
	}
	return own, nil
}

// pinnedWorker resolves the worker a request must run on ("" for any). A caller with a static key pins
// any worker whose binding admits it (§13.3, checked at dispatch). A caller with a signed token runs on
// the token's code_worker_id when it has one: a header may repeat it but not name another (403), and
// without the claim a header is an unauthenticated selection (403), as upstream answers.
func (h *Hub) pinnedWorker(r *http.Request, key *ClientKey) (string, *clientError) {
	id, ce := requestedWorker(r)
	if ce != nil {
		return "", ce
	}
	if key.signed {
		switch {
		case id != "" && key.CodeWorkerID == "":
			return "", pinError(http.StatusForbidden, "Code bridge worker selection is not authenticated: the bearer token carries no "+
				"code_worker_id claim, so "+HeaderLibreChatWorker+" may not pick a worker; drop the header or mint the token for that worker")
		case id != "" && id != key.CodeWorkerID:
			return "", pinError(http.StatusForbidden, "Code bridge worker selection does not match the authenticated claim: the header names "+
				quoteClaim(id)+", the token's code_worker_id "+quoteClaim(key.CodeWorkerID))
		}
		id = key.CodeWorkerID
	}
	return id, h.checkPin(id)
}

// checkPin refuses a pin that can never run: a malformed worker ID (400) or one outside the hub's worker
// allow-list (403, as upstream refuses a worker other than its configured one without dynamic workers).
func (h *Hub) checkPin(id string) *clientError {
	switch {
	case id == "":
		return nil
	case !bridge.ValidWorkerID(id):
		return pinError(http.StatusBadRequest, "Invalid code bridge worker ID "+quoteClaim(id)+": use [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
	case !h.configured(id):
		return pinError(http.StatusForbidden, "Worker "+quoteClaim(id)+" is not in this hub's worker allow-list (CODELLM_HUB_WORKER_IDS)")
	}
	return nil
}
