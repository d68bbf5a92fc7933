// Package openai is codellm's OpenAI chat-completions wire format: it decodes the fields of a request
// codellm reads (openai-contract.md §2), and encodes completions, SSE streams, the model list and the
// error envelope (§1.1, §10, §11) exactly as fleet's and OpenAI's clients expect them.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Error is the §11 error envelope with its HTTP status. Type derives from Status; Header carries extra
// response headers (WWW-Authenticate, Retry-After, Allow).
type Error struct {
	Status  int
	Code    string
	Message string
	Header  http.Header
}

// NewError builds an Error. With no args the format is used verbatim, so a message that quotes user
// bytes containing '%' (a stdout snippet, a path) is never mangled by fmt.
func NewError(status int, code, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Status: status, Code: code, Message: msg}
}

// Error returns "code: message" so logs show the stable code next to the human text.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Type is the envelope's "type", derived from the status as §11 lists it. Statuses §11 does not list
// (the debug surface's 403, 409, 415) fall back to the class of the status.
func (e *Error) Type() string {
	switch s := e.Status; {
	case s == http.StatusUnauthorized:
		return "authentication_error"
	case s == http.StatusUnprocessableEntity:
		return "code_execution_error"
	case s == http.StatusTooManyRequests:
		return "rate_limit_error"
	case s >= 500:
		return "api_error"
	default:
		return "invalid_request_error"
	}
}

// WithHeader returns e with an extra response header set, for 401/405/429 replies.
func (e *Error) WithHeader(key, value string) *Error {
	if e.Header == nil {
		e.Header = http.Header{}
	}
	e.Header.Set(key, value)
	return e
}

// envelope is the §11 body. Param is always null; the field order matches OpenAI's own errors.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Body renders the JSON envelope without a trailing newline.
func (e *Error) Body() []byte {
	return marshal(envelope{Error: envelopeBody{Message: e.Message, Type: e.Type(), Code: e.Code}})
}

// WriteError writes e as a JSON error reply with its extra headers.
func WriteError(w http.ResponseWriter, e *Error) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	writeBody(w, e.Status, e.Body())
}

// WriteJSON writes v as a JSON reply without HTML escaping (notes routinely contain '<' and '&').
// v must be encodable; a value that is not is a codellm bug and becomes a 500 internal_error.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalErr(v)
	if err != nil {
		WriteError(w, NewError(http.StatusInternalServerError, "internal_error", "cannot encode the reply"))
		return
	}
	writeBody(w, status, b)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// marshal encodes v compactly without HTML escaping. It is used only for codellm's own reply types,
// which always encode; a failure would be a programming error.
func marshal(v any) []byte {
	b, err := marshalErr(v)
	if err != nil {
		panic("openai: encoding a reply: " + err.Error())
	}
	return b
}

func marshalErr(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
