package hub

// Runtime sessions by hint: LibreChat's stateful code sessions (danny-avila/agents CodeExecutor.ts, the
// Code API's service/src/runtime-session/id.ts and execution-profile.ts). A /v1/exec that carries
// runtime_session_hint on the stateful profile runs in the session the hint names within its caller's
// scope, so a second exec with the same hint sees the first one's files, and the answer echoes
// runtime_session_id and runtime_status.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// The Code API's execution profile headers: the client asserts the profile it expects, the answer says
// which one served it.
const (
	expectedProfileHeader  = "X-CodeAPI-Expected-Profile"
	executionProfileHeader = "X-CodeAPI-Execution-Profile"
)

// The two public execution profiles.
const (
	profileDefault  = "default"
	profileStateful = "stateful"
)

// Runtime session modes (CODELLM_HUB_RUNTIME_SESSION_MODE, the Code API's RUNTIME_SESSION_MODE).
const (
	// RuntimeSessionsStateless ignores hints: every exec without session_id starts afresh, and a request
	// expecting the stateful profile is refused (409 execution_profile_mismatch).
	RuntimeSessionsStateless = "stateless"
	// RuntimeSessionsAffinity runs a hinted stateful exec in its runtime session; a hintless one runs
	// afresh.
	RuntimeSessionsAffinity = "affinity"
	// RuntimeSessionsStrict is affinity that refuses a stateful-profile exec without a hint (400).
	RuntimeSessionsStrict = "strict"
)

// Runtime statuses echoed in runtime_status.
const (
	runtimeStatusNew    = "new"
	runtimeStatusReused = "reused"
)

// runtimeHintMax and runtimeHintRe are the Code API's hint rules.
const runtimeHintMax = 128

var runtimeHintRe = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// runtimeSession is the runtime session a hinted exec runs in: id is the Code API's
// rt_<40 hex> identity, sid the hub session (21 characters, as LibreChat validates session ids) that
// carries it.
type runtimeSession struct {
	id, sid string
}

// profileError is a refusal of the execution profile assertion or of the hint, in the Code API's shape
// for profiles ({error, message, expected_profile, actual_profile}) or the exec envelope for hints.
type profileError struct {
	status             int
	code, message      string
	expected, actual   string
	profileAssertionOK bool // the profile was fine; the hint was not (exec envelope)
}

func (e *profileError) write(w http.ResponseWriter) {
	if e.profileAssertionOK {
		writeExecError(w, &clientError{status: e.status, code: e.code, message: e.message})
		return
	}
	o := &bridge.Object{}
	o.Set("error", e.code)
	o.Set("message", e.message)
	o.Set("expected_profile", e.expected)
	o.Set("actual_profile", e.actual)
	b, _ := bridge.Canonical(o)
	writeJSON(w, e.status, b)
}

// execProfile resolves the profile an exec is served on and, on the stateful profile with a hint, its
// runtime session (nil: the exec runs as before). The hub serves both profiles: a request expecting
// default is served stateless (its hint ignored, as a default deployment ignores it); one expecting
// stateful is served in its runtime session unless hint sessions are off; one without the header is
// served stateful exactly when it carries a hint. It sets X-CodeAPI-Execution-Profile on the answer.
func (h *Hub) execProfile(w http.ResponseWriter, r *http.Request, key *ClientKey, hint json.RawMessage) (*runtimeSession, *profileError) {
	mode := h.cfg.RuntimeSessionMode
	hubProfile := profileStateful
	if mode == RuntimeSessionsStateless {
		hubProfile = profileDefault
	}
	values := r.Header.Values(expectedProfileHeader)
	expected := strings.TrimSpace(strings.Join(values, ","))
	if len(values) > 1 || (expected != "" && expected != profileDefault && expected != profileStateful) {
		w.Header().Set(executionProfileHeader, hubProfile)
		return nil, &profileError{status: http.StatusBadRequest, code: "invalid_execution_profile", expected: expected, actual: hubProfile,
			message: expectedProfileHeader + " must be one value, default or stateful"}
	}
	if expected == profileStateful && mode == RuntimeSessionsStateless {
		w.Header().Set(executionProfileHeader, profileDefault)
		return nil, &profileError{status: http.StatusConflict, code: "execution_profile_mismatch", expected: expected, actual: profileDefault,
			message: "Expected the stateful execution profile, but reached default (this hub's CODELLM_HUB_RUNTIME_SESSION_MODE is stateless)"}
	}
	profile := profileDefault
	if expected == profileStateful || (expected == "" && mode != RuntimeSessionsStateless && len(hint) > 0 && string(hint) != "null" && string(hint) != `""`) {
		profile = profileStateful
	}
	w.Header().Set(executionProfileHeader, profile)
	if profile == profileDefault {
		return nil, nil
	}
	hv, msg := runtimeHint(hint)
	if msg == "" && hv == "" && mode == RuntimeSessionsStrict {
		msg = "runtime_session_hint is required in strict mode: send the conversation's hint with every stateful-profile exec"
	}
	if msg != "" {
		return nil, &profileError{status: http.StatusBadRequest, code: "invalid_request", message: msg, profileAssertionOK: true}
	}
	if hv == "" {
		return nil, nil // affinity without a hint: a one-shot run, never a shared per-user session
	}
	id := runtimeSessionID(key.TenantID, key.UserID, hv)
	sum := sha256.Sum256([]byte("codellm hub session\x00" + id))
	return &runtimeSession{id: id, sid: base64.RawURLEncoding.EncodeToString(sum[:])[:21]}, nil
}

// runtimeHint validates a runtime_session_hint as the Code API does: absent, null or "" is no hint; a
// non-string, one over runtimeHintMax characters or one with other characters than runtimeHintRe's is
// refused with msg.
func runtimeHint(raw json.RawMessage) (hint, msg string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	if json.Unmarshal(raw, &hint) != nil {
		return "", "runtime_session_hint must be a string"
	}
	switch {
	case hint == "":
		return "", ""
	case len([]rune(hint)) > runtimeHintMax:
		return "", "runtime_session_hint must be at most 128 characters"
	case !runtimeHintRe.MatchString(hint):
		return "", `runtime_session_hint may only contain letters, digits, ".", "_", ":", and "-"`
	}
	return hint, ""
}

// runtimeSessionID is the Code API's deriveRuntimeSessionId: the hint partitions sessions only within
// one (tenant, user) scope, which comes from the API key, never from the client. Fields containing NUL
// switch to a JSON encoding so that field boundaries cannot be forged.
func runtimeSessionID(tenant, user, hint string) string {
	fields := []string{tenant, user, hint}
	material := strings.Join(fields, "\x00")
	if strings.Contains(tenant+user+hint, "\x00") {
		b, _ := json.Marshal(fields)
		material = "v2:" + string(b)
	}
	sum := sha256.Sum256([]byte(material))
	return "rt_" + hex.EncodeToString(sum[:])[:40]
}

// runtimeSessionRun points d at rs's hub session. It reports whether the session's files may still be
// where the run goes (a stateful session whose worker process is the one that ran it last); a session
// whose worker restarted since is started afresh rather than refused, as a stateful Code API workspace
// "may reset at any time" (runtime_status says "new").
func (h *Hub) runtimeSessionRun(ctx context.Context, d *dispatchReq, rs *runtimeSession) (warm bool, ce *clientError) {
	d.sessionID = rs.sid
	s, err := h.store.Session(ctx, rs.sid)
	if err != nil {
		return false, h.fail(err)
	}
	if s != nil {
		ce := h.useSession(ctx, d, s)
		if ce == nil {
			return s.Stateful, nil
		}
		if ce.code != sessionLost {
			return false, ce
		}
		d.affinity, d.stateful = "", false
	}
	d.session = &store.Session{ID: rs.sid, TenantID: d.caller.TenantID}
	return false, nil
}

// echoRuntimeSession adds runtime_session_id and runtime_status to an exec answer: "reused" when the run
// continued the session's state on the worker that holds it, "new" otherwise.
func echoRuntimeSession(reply *bridge.Object, rs *runtimeSession, warm bool, out *outcome) {
	status := runtimeStatusNew
	if warm && out.stateful {
		status = runtimeStatusReused
	}
	reply.Set("runtime_session_id", rs.id)
	reply.Set("runtime_status", status)
}
