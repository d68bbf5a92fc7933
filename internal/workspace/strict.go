package workspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"

	"github.com/codellm/codellm/internal/wire"
)

// envelope holds the §9.1 envelope keys a request may repeat. Do receives the operation separately, so they
// are optional here, but when present they must agree with the call.
type envelope struct {
	ProtocolVersion *int    `json:"protocolVersion,omitempty"`
	Operation       *string `json:"operation,omitempty"`
	WorkspaceID     *string `json:"workspaceId,omitempty"`
}

var workspaceIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func (e *envelope) check(op string) error {
	if e.ProtocolVersion != nil && *e.ProtocolVersion != 1 {
		return newErr(CodeInvalidRequest, "protocolVersion must be 1")
	}
	if e.Operation != nil && *e.Operation != op {
		return newErr(CodeInvalidRequest, "operation does not match the request")
	}
	if e.WorkspaceID != nil && !workspaceIDPattern.MatchString(*e.WorkspaceID) {
		return newErr(CodeInvalidRequest, "workspaceId is malformed")
	}
	return nil
}

// decodeStrict decodes one JSON object into v, rejecting what encoding/json would silently accept: unknown
// keys (including case-insensitive near misses such as "Path"), duplicate keys, null values, a top-level
// non-object and trailing data. The spec requires unknown keys to be rejected everywhere.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := checkShape(dec, reflect.TypeOf(v), ""); err != nil {
		return newErr(CodeInvalidRequest, "invalid request: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return newErr(CodeInvalidRequest, "invalid request: trailing data after the JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return newErr(CodeInvalidRequest, fmt.Sprintf("invalid request: %s must be %s", te.Field, kindName(te.Type)))
		}
		return newErr(CodeInvalidRequest, "invalid request: "+err.Error())
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Slice:
		return "an array"
	case reflect.Struct:
		return "an object"
	}
	return t.String()
}

func jsonFields(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, into)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		into[name] = f.Type
	}
}

func checkShape(dec *json.Decoder, t reflect.Type, where string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("malformed JSON")
	}
	if tok == nil {
		if where == "" {
			return fmt.Errorf("request must be a JSON object")
		}
		return fmt.Errorf("%s must not be null", where)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			if where == "" {
				return fmt.Errorf("request must be a JSON object")
			}
			return fmt.Errorf("%s must be an object", where)
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("malformed JSON")
			}
			key, _ := kt.(string)
			ft, ok := fields[key]
			name := key
			if where != "" {
				name = where + "." + key
			}
			if !ok {
				return fmt.Errorf("unknown key %q", wire.ClipUTF16(name, 200))
			}
			if seen[key] {
				return fmt.Errorf("duplicate key %q", name)
			}
			seen[key] = true
			if err := checkShape(dec, ft, name); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case reflect.Slice:
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return fmt.Errorf("%s must be an array", where)
		}
		for i := 0; dec.More(); i++ {
			if err := checkShape(dec, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	default:
		if _, ok := tok.(json.Delim); ok {
			return fmt.Errorf("%s must be %s", where, kindName(t))
		}
	}
	return nil
}

// encodeResult marshals a result without HTML escaping (the bridge's canonical encoder does not escape <, >, &).
func encodeResult(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}
