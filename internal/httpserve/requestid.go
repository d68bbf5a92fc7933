package httpserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
)

// RequestID returns the X-Request-Id of a response: the client's own id when it is safe to echo (1 to
// 128 bytes of letters, digits and "-_.:"; nothing that could split a header or forge a log line), else
// a fresh "req_" + 32 hex digits from crypto/rand, the form OpenAI uses.
func RequestID(client string) string {
	if n := len(client); n > 0 && n <= 128 && strings.Trim(client, requestIDChars) == "" {
		return client
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

const requestIDChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:"

type requestIDKey struct{}

// WithRequestID sets X-Request-Id on every response of h (see RequestID) and makes the id available to
// h through RequestIDOf.
func WithRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := RequestID(r.Header.Get("X-Request-Id"))
		w.Header().Set("X-Request-Id", id)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// RequestIDOf returns the id WithRequestID gave r ("" outside it).
func RequestIDOf(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}
