package debugger

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// determinism reads a run-block or session request's "metadata" the way the chat route does
// (metadata.deterministic, seed, now; the bag's now and the operator's --deterministic as defaults), so
// that the debugger steps a body to the bytes a chat run of it gives. A deterministic answer carries
// wire.DeterminismHeader.
func (d *Debugger) determinism(w http.ResponseWriter, f fields) (*sandbox.Determinism, *openai.Error) {
	meta := map[string]json.RawMessage{}
	if raw, ok := f["metadata"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
			return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "metadata must be an object")
		}
	}
	choice, me := wire.DecodeDeterminism(meta)
	if me != nil {
		return nil, openai.InvalidMetadata(me)
	}
	det, err := d.eng.Determinism(choice, f.input())
	if err != nil {
		return nil, apierror.Map(err, 0)
	}
	if det != nil {
		w.Header().Set(wire.DeterminismHeader, engine.DeterminismHeaderValue(det))
	}
	return det, nil
}
