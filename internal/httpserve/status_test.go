package httpserve

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := &StatusWriter{ResponseWriter: rec}
	sw.WriteHeader(http.StatusTeapot)
	sw.WriteHeader(http.StatusInternalServerError) // superfluous: not recorded
	if sw.Status != http.StatusTeapot {
		t.Errorf("Status = %d, want the first one", sw.Status)
	}
	rec = httptest.NewRecorder()
	sw = &StatusWriter{ResponseWriter: rec}
	sw.Write([]byte("x"))
	sw.Flush()
	if sw.Status != http.StatusOK || !rec.Flushed {
		t.Errorf("Status = %d flushed %v, want an implicit 200 and the flush passed through", sw.Status, rec.Flushed)
	}
	if http.NewResponseController(sw).Flush() != nil {
		t.Error("ResponseController cannot reach the underlying writer")
	}
}
