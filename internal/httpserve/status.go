package httpserve

import "net/http"

// StatusWriter records the first status a handler answered, for request logs and metrics (Status 0:
// nothing was written). It passes Flush through and unwraps for http.ResponseController.
type StatusWriter struct {
	http.ResponseWriter
	Status int
}

// WriteHeader records code (the first one only) and sends it.
func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 before the first byte.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer when it can.
func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
