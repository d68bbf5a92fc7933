package bridge

// Wire types, in the field order the reference writes them (the canonical
// encoder keeps struct field order, and the order is part of the signed bytes).

// RedeemRequest is route 1, unsigned.
type RedeemRequest struct {
	ProtocolVersion int    `json:"protocolVersion"`
	WorkerID        string `json:"workerId"`
	Code            string `json:"code"`
	PublicKey       string `json:"publicKey"`
}

// CredentialResponse answers redeem (1) and refresh (8).
type CredentialResponse struct {
	ProtocolVersion int    `json:"protocolVersion"`
	WorkerID        string `json:"workerId"`
	Credential      string `json:"credential"`
	ExpiresAt       string `json:"expiresAt"`
}

// Workspace describes one registered directory.
type Workspace struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Operations []string `json:"operations,omitempty"`
}

// WorkspaceTools is the workspace part of the capabilities (§8.1).
type WorkspaceTools struct {
	ProtocolVersion  int         `json:"protocolVersion"`
	Operations       []string    `json:"operations"`
	Workspaces       []Workspace `json:"workspaces"`
	WriteFileModes   []string    `json:"writeFileModes,omitempty"`
	EditFileModes    []string    `json:"editFileModes,omitempty"`
	EditFileFeatures []string    `json:"editFileFeatures,omitempty"`
	ListFileFeatures []string    `json:"listFileFeatures,omitempty"`
}

// Capabilities is what a worker registers (§8.1).
type Capabilities struct {
	StatefulWorkspace         bool            `json:"statefulWorkspace"`
	SandboxProfile            string          `json:"sandboxProfile"`
	Runtimes                  []string        `json:"runtimes"`
	PolicyDigest              string          `json:"policyDigest,omitempty"`
	RequiresReadyConfirmation bool            `json:"requiresReadyConfirmation,omitempty"`
	WorkspaceTools            *WorkspaceTools `json:"workspaceTools,omitempty"`
	// WorkspaceLeaseSlots asks for lease slots (LibreChat's field: assignments held at once, 1..8 there;
	// codellm's hub grants up to MaxLeaseSlots).
	WorkspaceLeaseSlots int `json:"workspaceLeaseSlots,omitempty"`
}

// MaxLeaseSlots is the most lease slots codellm's hub grants one registration.
const MaxLeaseSlots = 256

// RegisterRequest is route 2 (registration and heartbeat).
type RegisterRequest struct {
	ProtocolVersion int          `json:"protocolVersion"`
	WorkerID        string       `json:"workerId"`
	IncarnationID   string       `json:"incarnationId"`
	Capabilities    Capabilities `json:"capabilities"`
}

// RegisterResponse answers route 2. A nil supported* list means the hub did
// not send it (an older hub); negotiation treats that differently from [].
type RegisterResponse struct {
	ProtocolVersion                   int      `json:"protocolVersion"`
	WorkerID                          string   `json:"workerId"`
	IncarnationID                     string   `json:"incarnationId"`
	RegistrationGeneration            int64    `json:"registrationGeneration"`
	RegisteredAt                      string   `json:"registeredAt"`
	LeaseTTLMs                        int64    `json:"leaseTtlMs"`
	SupportedWorkspaceToolOperations  []string `json:"supportedWorkspaceToolOperations,omitempty"`
	SupportedWorkspaceWriteFileModes  []string `json:"supportedWorkspaceWriteFileModes,omitempty"`
	SupportedWorkspaceEditFileModes   []string `json:"supportedWorkspaceEditFileModes,omitempty"`
	SupportedWorkspaceEditFileFeature []string `json:"supportedWorkspaceEditFileFeatures,omitempty"`
	SupportedWorkspaceListFileFeature []string `json:"supportedWorkspaceListFileFeatures,omitempty"`
	// WorkspaceLeaseSlots is the granted slot count, sent to a worker that asked for slots (the worker
	// must not lease in parallel without it).
	WorkspaceLeaseSlots int `json:"workspaceLeaseSlots,omitempty"`
}

// ReadyRequest is route 3.
type ReadyRequest struct {
	ProtocolVersion        int    `json:"protocolVersion"`
	IncarnationID          string `json:"incarnationId"`
	RegistrationGeneration int64  `json:"registrationGeneration"`
}

// ReadyResponse answers route 3.
type ReadyResponse struct {
	ProtocolVersion int  `json:"protocolVersion"`
	Ready           bool `json:"ready"`
}

// LeaseRequest is route 4. WaitMs nil means the default.
type LeaseRequest struct {
	ProtocolVersion    int      `json:"protocolVersion"`
	WaitMs             *float64 `json:"waitMs,omitempty"`
	IncarnationID      string   `json:"incarnationId"`
	WorkspaceLeaseSlot *float64 `json:"workspaceLeaseSlot,omitempty"`
}

// LeaseResponse answers route 4; Assignment is absent (never null) when the
// wait ended empty.
type LeaseResponse struct {
	ProtocolVersion int         `json:"protocolVersion"`
	ServerElapsedMs int64       `json:"serverElapsedMs"`
	Assignment      *Assignment `json:"assignment,omitempty"`
}

// Execution kinds of an assignment.
const (
	KindSandbox       = "sandbox"
	KindWorkspaceTool = "workspace_tool"
)

// Assignment is one unit of work (§6.1). Request is opaque: for "sandbox" it
// is {body, headers}, for "workspace_tool" a §9 request.
type Assignment struct {
	ProtocolVersion  int    `json:"protocolVersion"`
	AssignmentID     string `json:"assignmentId"`
	WorkerID         string `json:"workerId"`
	IncarnationID    string `json:"incarnationId"`
	Generation       int64  `json:"generation"`
	LeaseToken       string `json:"leaseToken"`
	ExpiresAt        string `json:"expiresAt"`
	RemainingMs      int64  `json:"remainingMs"`
	RuntimeSessionID string `json:"runtimeSessionId,omitempty"`
	ExecutionKind    string `json:"executionKind,omitempty"`
	// WorkspaceLeaseSlot echoes the lease request's slot (absent when it named none).
	WorkspaceLeaseSlot *int `json:"workspaceLeaseSlot,omitempty"`
	Request            Raw  `json:"request"`
}

// Kind returns the execution kind, defaulting to "sandbox".
func (a *Assignment) Kind() string {
	if a.ExecutionKind == "" {
		return KindSandbox
	}
	return a.ExecutionKind
}

// AckRequest is route 5.
type AckRequest struct {
	ProtocolVersion int    `json:"protocolVersion"`
	IncarnationID   string `json:"incarnationId"`
	Generation      int64  `json:"generation"`
	LeaseToken      string `json:"leaseToken"`
}

// AcceptedResponse answers ack (5) and settle (7).
type AcceptedResponse struct {
	ProtocolVersion int  `json:"protocolVersion"`
	Accepted        bool `json:"accepted"`
}

// CancellationRequest is route 6.
type CancellationRequest struct {
	ProtocolVersion int    `json:"protocolVersion"`
	IncarnationID   string `json:"incarnationId"`
}

// CancellationResponse answers route 6.
type CancellationResponse struct {
	ProtocolVersion int  `json:"protocolVersion"`
	Cancelled       bool `json:"cancelled"`
}

// Settlement statuses.
const (
	StatusFulfilled = "fulfilled"
	StatusRejected  = "rejected"
)

// MaxSettlementError is the longest settlement error, in UTF-16 units.
const MaxSettlementError = 4096

// Settlement is route 7 (§6.6). Error is a pointer so that an empty error
// string is distinguishable from an absent one.
type Settlement struct {
	ProtocolVersion int     `json:"protocolVersion"`
	Generation      int64   `json:"generation"`
	LeaseToken      string  `json:"leaseToken"`
	IncarnationID   string  `json:"incarnationId"`
	Status          string  `json:"status"`
	Result          Raw     `json:"result,omitzero"`
	Error           *string `json:"error,omitempty"`
	ErrorCode       string  `json:"errorCode,omitempty"`
}

// RefreshRequest is route 8.
type RefreshRequest struct {
	ProtocolVersion int `json:"protocolVersion"`
}

// ResetRequest is route 9.
type ResetRequest struct {
	ProtocolVersion  int    `json:"protocolVersion"`
	IncarnationID    string `json:"incarnationId"`
	RuntimeSessionID string `json:"runtimeSessionId"`
	ConfirmDiscarded bool   `json:"confirmDiscarded"`
}

// ResetResponse answers route 9.
type ResetResponse struct {
	ProtocolVersion int  `json:"protocolVersion"`
	Reset           bool `json:"reset"`
}

// Principal types of a binding.
var PrincipalTypes = []string{"deployment", "tenant", "user", "role", "group"}

// Principal names who may use a bound worker.
type Principal struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Binding ties a worker to a tenant and principal (§3.8, §13.3).
type Binding struct {
	TenantID  string    `json:"tenantId"`
	Principal Principal `json:"principal"`
}

// CreatePairingRequest is admin route A1.
type CreatePairingRequest struct {
	WorkerID string   `json:"workerId"`
	Binding  *Binding `json:"binding,omitempty"`
}

// CreatePairingResponse answers A1.
type CreatePairingResponse struct {
	ProtocolVersion int    `json:"protocolVersion"`
	WorkerID        string `json:"workerId"`
	Code            string `json:"code"`
	ExpiresAt       string `json:"expiresAt"`
}

// RevokeResponse answers A2.
type RevokeResponse struct {
	ProtocolVersion int  `json:"protocolVersion"`
	Revoked         bool `json:"revoked"`
}

// StatusResponse answers A3.
type StatusResponse struct {
	ProtocolVersion  int    `json:"protocolVersion"`
	WorkerID         string `json:"workerId"`
	Online           bool   `json:"online"`
	Ready            bool   `json:"ready"`
	LeaseExpiresInMs *int64 `json:"leaseExpiresInMs,omitempty"`
	Capabilities     Raw    `json:"capabilities,omitzero"`
}

// WorkspaceErrorCodes are the settlement errorCodes of §9.9.
var WorkspaceErrorCodes = []string{
	"INVALID_PATH", "INVALID_REQUEST", "READ_LIMIT_EXCEEDED", "WRITE_LIMIT_EXCEEDED",
	"WRITE_DISABLED", "WRITE_UNAVAILABLE", "EDIT_CONFLICT", "REGISTRATION_INVALID",
	"EXECUTION_ABORTED", "LIST_TIMEOUT", "LIST_UNAVAILABLE", "SEARCH_TIMEOUT",
	"SEARCH_UNAVAILABLE", "COMMAND_TIMEOUT", "COMMAND_UNAVAILABLE", "COMMAND_DISABLED",
}
