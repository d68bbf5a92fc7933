package execmanifest

import (
	"cmp"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// BodyMember is the execute body member that carries the manifest (preferred over Header).
const BodyMember = "execution_manifest"

// Token returns the manifest of an execute request: the body's "execution_manifest" when it is a
// non-empty string, else the header's value.
func Token(body *bridge.Object, header string) string {
	if s, ok := getString(body, BodyMember); ok && s != "" {
		return s
	}
	return header
}

// VerifyRequest verifies token (Verify) and binds it to the execute request body: the manifest must name
// the body's output session (output_session_id, else session_id), exactly its by-reference input files
// and their storage sessions, and carry the SHA-256 of the body. codellm requires the body hash: the Code
// API accepts a manifest without one only during a configured rollout window, and a worker that cannot
// tell a rollout from a forgery refuses it.
func VerifyRequest(token string, key ed25519.PublicKey, body *bridge.Object, now time.Time) (*Claims, error) {
	if token == "" {
		return nil, fail(ReasonMissingHeader, Header+" is required")
	}
	c, err := Verify(token, key, now)
	if err != nil {
		return nil, err
	}
	if out := OutputSession(body); out == "" || c.OutputSessionID != out {
		return nil, fail(ReasonScopeMismatch, "Execution manifest output session does not match request")
	}
	refs, e := RequestInputFiles(body)
	if e != nil {
		return nil, e
	}
	files := make([]InputFile, len(refs))
	for i, r := range refs {
		files[i] = r.InputFile
	}
	if !slices.Equal(sortFiles(files), sortFiles(slices.Clone(c.InputFiles))) {
		return nil, fail(ReasonScopeMismatch, "Execution manifest input file scope does not match request")
	}
	var want []string
	for _, f := range files {
		if !slices.Contains(want, f.SessionID) {
			want = append(want, f.SessionID)
		}
	}
	slices.Sort(want)
	if got := slices.Sorted(slices.Values(c.ReadSessions)); !slices.Equal(want, got) {
		return nil, fail(ReasonScopeMismatch, "Execution manifest read sessions do not match request")
	}
	sum, err := BodySHA256(body)
	if err != nil || c.BodySHA256 == "" || c.BodySHA256 != sum {
		return nil, fail(ReasonScopeMismatch, "Execution manifest body hash does not match request")
	}
	return c, nil
}

// RequestFile is one by-reference file of an execute body: what a manifest must authorise, and where in
// the body's files it stands.
type RequestFile struct {
	InputFile
	Index int
}

// RequestInputFiles lists the body's by-reference files (those with a non-empty string "id") as the Code
// API describes them in a manifest: the storage session is the file's storage_session_id, else the body's
// output session; an unnamed file is "file<index>.code".
func RequestInputFiles(body *bridge.Object) ([]RequestFile, *Error) {
	v, _ := body.Get("files")
	arr, _ := v.([]any)
	var files []RequestFile
	for i, e := range arr {
		fo, _ := e.(*bridge.Object)
		id, _ := getString(fo, "id")
		if id == "" {
			continue
		}
		sid, ok := getString(fo, "storage_session_id")
		if !ok {
			sid = OutputSession(body)
		}
		if sid == "" {
			return nil, fail(ReasonScopeMismatch, "Execution manifest input file scope does not match request")
		}
		name, _ := getString(fo, "name")
		if name == "" {
			name = "file" + strconv.Itoa(i) + ".code"
		}
		files = append(files, RequestFile{InputFile{ID: id, SessionID: sid, Name: name}, i})
	}
	return files, nil
}

// OutputSession is the storage session generated files go to: the body's output_session_id, or its
// session_id when that member is absent or null ("" when neither is a string).
func OutputSession(body *bridge.Object) string {
	if v, ok := body.Get("output_session_id"); ok && v != nil {
		s, _ := v.(string)
		return s
	}
	s, _ := getString(body, "session_id")
	return s
}

func sortFiles(f []InputFile) []InputFile {
	slices.SortFunc(f, func(a, b InputFile) int {
		return cmp.Or(cmp.Compare(a.SessionID, b.SessionID), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Name, b.Name))
	})
	return f
}

// BodySHA256 is the Code API's execute_body_sha256 of an execute body: base64url (unpadded) SHA-256 of
// the sorted canonical JSON of the body without its "execution_manifest" member.
func BodySHA256(body *bridge.Object) (string, error) {
	rest := &bridge.Object{}
	for _, m := range body.Members {
		if m.Key != BodyMember {
			rest.Members = append(rest.Members, m)
		}
	}
	canon, err := SortedCanonical(rest)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
