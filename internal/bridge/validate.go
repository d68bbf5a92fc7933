package bridge

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Validators run on the ordered tree the hub parsed (the same tree whose
// canonical form was verified), so type checks see exactly what JSON.parse
// would. Each returns a code-less 400 *Error with the reference's message.

// Validation messages of the reference.
const (
	MsgInvalidRedeem       = "Invalid bridge pairing redemption"
	MsgInvalidRegistration = "Invalid bridge worker registration"
	MsgInvalidSettlement   = "Invalid bridge settlement"
	MsgResetConfirmation   = "Workspace reset requires confirmation of local discard"
	MsgInvalidReady        = "Invalid bridge worker readiness"
	MsgInvalidLease        = "Invalid bridge lease request"
	MsgInvalidAck          = "Invalid bridge assignment acknowledgement"
	MsgInvalidCancellation = "Invalid bridge cancellation request"
	MsgInvalidRequest      = "Invalid bridge request"
	MsgInvalidPairing      = "Invalid bridge pairing request"
)

func invalid(msg string) *Error { return Errorf(http.StatusBadRequest, msg) }

// ParseBody parses a received body (an empty body counts as {}) and returns
// the tree and its canonical bytes, the input of the body digest (§4.2).
func ParseBody(raw []byte) (*Object, []byte, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return &Object{}, []byte("{}"), nil
	}
	o, err := ParseObject(raw)
	if err != nil {
		return nil, nil, invalid(MsgInvalidRequest)
	}
	c, err := Canonical(o)
	if err != nil {
		return nil, nil, invalid(MsgInvalidRequest)
	}
	return o, c, nil
}

// CheckVersion reports whether protocolVersion is the JSON integer 1.
func CheckVersion(o *Object) bool {
	v, ok := o.Get("protocolVersion")
	f, isNum := v.(float64)
	return ok && isNum && f == ProtocolVersion
}

func str(o *Object, key string) (string, bool) {
	v, ok := o.Get(key)
	s, isStr := v.(string)
	return s, ok && isStr
}

func num(o *Object, key string) (float64, bool) {
	v, ok := o.Get(key)
	f, isNum := v.(float64)
	return f, ok && isNum
}

// jsLen is a string's JavaScript length (UTF-16 code units). A WTF-8 lone
// surrogate counts as the one unit it is in JavaScript.
func jsLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		if s[i] == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			n++
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		n += utf16.RuneLen(r)
		i += size
	}
	return n
}

// decodeInto fills a typed struct from the canonical form of o.
func decodeInto(o *Object, v any, msg string) error {
	c, err := Canonical(o)
	if err != nil {
		return invalid(msg)
	}
	if err := json.Unmarshal(c, v); err != nil {
		return invalid(msg)
	}
	return nil
}

// ValidateRedeem checks route 1's body (the worker ID must also be
// configured; the hub checks that).
func ValidateRedeem(o *Object) (*RedeemRequest, error) {
	id, ok1 := str(o, "workerId")
	code, ok2 := str(o, "code")
	pk, ok3 := str(o, "publicKey")
	if !CheckVersion(o) || !ok1 || !ValidWorkerID(id) || !ok2 || len(code) < 16 || !ok3 || jsLen(pk) > MaxPublicKeyLen {
		return nil, invalid(MsgInvalidRedeem)
	}
	return &RedeemRequest{ProtocolVersion: 1, WorkerID: id, Code: code, PublicKey: pk}, nil
}

// ValidateRegister checks route 2's body, including the capabilities (§8.1).
// It returns the typed request and the capabilities tree as received.
func ValidateRegister(o *Object) (*RegisterRequest, *Object, error) {
	id, ok1 := str(o, "workerId")
	inc, ok2 := str(o, "incarnationId")
	cv, _ := o.Get("capabilities")
	caps, ok3 := cv.(*Object)
	if !CheckVersion(o) || !ok1 || !ValidWorkerID(id) || !ok2 || !ValidIncarnationID(inc) || !ok3 {
		return nil, nil, invalid(MsgInvalidRegistration)
	}
	if err := ValidateCapabilities(caps); err != nil {
		return nil, nil, err
	}
	req := &RegisterRequest{ProtocolVersion: 1, WorkerID: id, IncarnationID: inc}
	if err := decodeInto(caps, &req.Capabilities, MsgInvalidRegistration); err != nil {
		return nil, nil, err
	}
	return req, caps, nil
}

// Workspace tool operations, in the hub's advertised order.
var WorkspaceOperations = []string{
	"read_file", "search_text", "list_files", "write_file", "preview_edit", "edit_file", "execute_command",
}

// stringList reads a list of distinct strings with 1..max entries drawn
// from allowed (nil allowed = any, with per-item length 1..itemMax).
func stringList(v any, minN, maxN int, allowed []string, itemMax int, distinct bool) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok || len(arr) < minN || len(arr) > maxN {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		if allowed != nil && !slices.Contains(allowed, s) {
			return nil, false
		}
		if allowed == nil && (jsLen(s) < 1 || jsLen(s) > itemMax) {
			return nil, false
		}
		if distinct && slices.Contains(out, s) {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// ValidateCapabilities applies §8.1. Unknown keys of the capabilities and of
// workspaceTools are ignored; unknown keys of a workspace descriptor are not.
func ValidateCapabilities(c *Object) error {
	bad := invalid(MsgInvalidRegistration)
	if v, ok := c.Get("statefulWorkspace"); !ok {
		return bad
	} else if _, isBool := v.(bool); !isBool {
		return bad
	}
	if p, ok := str(c, "sandboxProfile"); !ok || strings.TrimSpace(p) == "" || jsLen(p) > 128 {
		return bad
	}
	rv, _ := c.Get("runtimes")
	if _, ok := stringList(rv, 0, 32, nil, 64, false); !ok {
		return bad
	}
	if v, ok := c.Get("policyDigest"); ok {
		if s, isStr := v.(string); !isStr || !hexDigestRe.MatchString(s) {
			return bad
		}
	}
	if v, ok := c.Get("requiresReadyConfirmation"); ok {
		if _, isBool := v.(bool); !isBool {
			return bad
		}
	}
	if v, ok := c.Get("workspaceLeaseSlots"); ok {
		if f, isNum := v.(float64); !isNum || f != math.Trunc(f) || f < 1 || f > MaxLeaseSlots {
			return bad
		}
	}
	wv, ok := c.Get("workspaceTools")
	if !ok {
		return nil
	}
	if wt, isObj := wv.(*Object); !isObj || !validWorkspaceTools(wt) {
		return bad
	}
	return nil
}

// validWorkspaceTools checks capabilities.workspaceTools: its version, operations, workspaces, and that
// each mode or feature list names values the spec knows for an operation it advertises.
func validWorkspaceTools(wt *Object) bool {
	if !CheckVersion(wt) {
		return false
	}
	ov, _ := wt.Get("operations")
	ops, ok := stringList(ov, 1, 7, WorkspaceOperations, 0, true)
	if !ok {
		return false
	}
	wsv, _ := wt.Get("workspaces")
	if !validWorkspaces(wsv, ops) {
		return false
	}
	has := func(op string) bool { return slices.Contains(ops, op) }
	if v, ok := wt.Get("writeFileModes"); ok {
		if _, ok := stringList(v, 1, 2, []string{"replace", "create"}, 0, true); !ok || !has("write_file") {
			return false
		}
	}
	if v, ok := wt.Get("editFileModes"); ok {
		if _, ok := stringList(v, 1, 2, []string{"single", "batch"}, 0, true); !ok || !(has("edit_file") || has("preview_edit")) {
			return false
		}
	}
	if v, ok := wt.Get("editFileFeatures"); ok {
		if l, ok := stringList(v, 1, 1, []string{"expected_base_sha256"}, 0, true); !ok || len(l) != 1 || !has("edit_file") {
			return false
		}
	}
	if v, ok := wt.Get("listFileFeatures"); ok {
		if l, ok := stringList(v, 1, 1, []string{"after_path"}, 0, true); !ok || len(l) != 1 || !has("list_files") {
			return false
		}
	}
	return true
}

// validWorkspaces checks workspaceTools.workspaces: 1 to 32 objects of a unique valid id, a name and
// optionally operations among ops.
func validWorkspaces(wsv any, ops []string) bool {
	wsArr, ok := wsv.([]any)
	if !ok || len(wsArr) < 1 || len(wsArr) > 32 {
		return false
	}
	var ids []string
	for _, e := range wsArr {
		w, ok := e.(*Object)
		if !ok {
			return false
		}
		for _, m := range w.Members {
			if m.Key != "id" && m.Key != "name" && m.Key != "operations" {
				return false
			}
		}
		id, ok1 := str(w, "id")
		name, ok2 := str(w, "name")
		if !ok1 || !ValidWorkerID(id) || slices.Contains(ids, id) || !ok2 || strings.TrimSpace(name) == "" || jsLen(name) > 128 {
			return false
		}
		ids = append(ids, id)
		if v, ok := w.Get("operations"); ok {
			if _, ok := stringList(v, 1, 7, ops, 0, true); !ok {
				return false
			}
		}
	}
	return true
}

// ValidateReady checks route 3's body.
func ValidateReady(o *Object) (*ReadyRequest, error) {
	inc, ok1 := str(o, "incarnationId")
	g, ok2 := num(o, "registrationGeneration")
	if !CheckVersion(o) || !ok1 || !ValidIncarnationID(inc) || !ok2 || !IsSafeInteger(g) || g < 1 {
		return nil, invalid(MsgInvalidReady)
	}
	return &ReadyRequest{ProtocolVersion: 1, IncarnationID: inc, RegistrationGeneration: int64(g)}, nil
}

// Lease wait bounds (§3.5).
const (
	DefaultWaitMs = 25000
	MaxWaitMs     = 30000
)

// ValidateLease checks route 4's body and returns the effective wait in ms.
func ValidateLease(o *Object) (*LeaseRequest, int64, error) {
	inc, ok := str(o, "incarnationId")
	if !CheckVersion(o) || !ok || !ValidIncarnationID(inc) {
		return nil, 0, invalid(MsgInvalidLease)
	}
	wait := float64(DefaultWaitMs)
	if v, present := o.Get("waitMs"); present {
		f, isNum := v.(float64)
		if !isNum || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
			return nil, 0, invalid(MsgInvalidLease)
		}
		wait = min(f, MaxWaitMs)
	}
	req := &LeaseRequest{ProtocolVersion: 1, IncarnationID: inc}
	if v, present := o.Get("workspaceLeaseSlot"); present {
		f, isNum := v.(float64)
		if !isNum || f != math.Trunc(f) || f < 0 || f >= MaxLeaseSlots {
			return nil, 0, invalid(MsgInvalidLease)
		}
		req.WorkspaceLeaseSlot = &f
	}
	req.WaitMs = &wait
	return req, int64(wait), nil
}

// ValidateAck checks route 5's body.
func ValidateAck(o *Object) (*AckRequest, error) {
	inc, ok1 := str(o, "incarnationId")
	g, ok2 := num(o, "generation")
	tok, ok3 := str(o, "leaseToken")
	if !CheckVersion(o) || !ok1 || !ValidIncarnationID(inc) || !ok2 || !IsSafeInteger(g) || g < 1 || !ok3 || !ValidToken(tok) {
		return nil, invalid(MsgInvalidAck)
	}
	return &AckRequest{ProtocolVersion: 1, IncarnationID: inc, Generation: int64(g), LeaseToken: tok}, nil
}

// ValidateCancellation checks route 6's body.
func ValidateCancellation(o *Object) (*CancellationRequest, error) {
	inc, ok := str(o, "incarnationId")
	if !CheckVersion(o) || !ok || !ValidIncarnationID(inc) {
		return nil, invalid(MsgInvalidCancellation)
	}
	return &CancellationRequest{ProtocolVersion: 1, IncarnationID: inc}, nil
}

// ValidateSettlement checks route 7's body (§6.6).
func ValidateSettlement(o *Object) (*Settlement, error) {
	bad := invalid(MsgInvalidSettlement)
	g, ok1 := num(o, "generation")
	tok, ok2 := str(o, "leaseToken")
	inc, ok3 := str(o, "incarnationId")
	status, ok4 := str(o, "status")
	if !CheckVersion(o) || !ok1 || !IsSafeInteger(g) || g < 1 || !ok2 || !ValidToken(tok) || !ok3 || !ValidIncarnationID(inc) || !ok4 {
		return nil, bad
	}
	s := &Settlement{ProtocolVersion: 1, Generation: int64(g), LeaseToken: tok, IncarnationID: inc, Status: status}
	switch status {
	case StatusRejected:
		msg, ok := str(o, "error")
		if !ok || jsLen(msg) > MaxSettlementError {
			return nil, bad
		}
		s.Error = &msg
		if v, present := o.Get("errorCode"); present {
			code, isStr := v.(string)
			if !isStr || !slices.Contains(WorkspaceErrorCodes, code) {
				return nil, bad
			}
			s.ErrorCode = code
		}
	case StatusFulfilled:
		v, _ := o.Get("result")
		r, ok := v.(*Object)
		if !ok || r == nil {
			return nil, bad
		}
		s.Result = NewRaw(r)
	default:
		return nil, bad
	}
	return s, nil
}

// ValidateRefresh checks route 8's body.
func ValidateRefresh(o *Object) error {
	if !CheckVersion(o) {
		return invalid(MsgInvalidRequest)
	}
	return nil
}

// MaxRuntimeSessionID bounds runtimeSessionId.
const MaxRuntimeSessionID = 512

// ValidateReset checks route 9's body.
func ValidateReset(o *Object) (*ResetRequest, error) {
	bad := invalid(MsgResetConfirmation)
	inc, ok1 := str(o, "incarnationId")
	sid, ok2 := str(o, "runtimeSessionId")
	cv, _ := o.Get("confirmDiscarded")
	if !CheckVersion(o) {
		return nil, invalid(MsgInvalidRequest)
	}
	if !ok1 || !ValidIncarnationID(inc) || !ok2 || strings.TrimSpace(sid) == "" || jsLen(sid) > MaxRuntimeSessionID || cv != true {
		return nil, bad
	}
	return &ResetRequest{ProtocolVersion: 1, IncarnationID: inc, RuntimeSessionID: sid, ConfirmDiscarded: true}, nil
}

// ValidateCreatePairing checks admin route A1's body.
func ValidateCreatePairing(o *Object) (*CreatePairingRequest, error) {
	bad := invalid(MsgInvalidPairing)
	id, ok := str(o, "workerId")
	if !ok || !ValidWorkerID(id) {
		return nil, bad
	}
	req := &CreatePairingRequest{WorkerID: id}
	if v, present := o.Get("binding"); present {
		b, ok := v.(*Object)
		if !ok {
			return nil, bad
		}
		tenant, ok1 := str(b, "tenantId")
		pv, _ := b.Get("principal")
		p, ok2 := pv.(*Object)
		if !ok1 || !ValidWorkerID(tenant) || !ok2 {
			return nil, bad
		}
		pt, ok3 := str(p, "type")
		pid, ok4 := str(p, "id")
		if !ok3 || !slices.Contains(PrincipalTypes, pt) || !ok4 || !ValidWorkerID(pid) {
			return nil, bad
		}
		req.Binding = &Binding{TenantID: tenant, Principal: Principal{Type: pt, ID: pid}}
	}
	return req, nil
}
