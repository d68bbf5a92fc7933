package bridge

import (
	"errors"
	"slices"
	"testing"
)

func mustObj(t *testing.T, s string) *Object {
	t.Helper()
	o, err := ParseObject([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

const fullCaps = `{"statefulWorkspace":true,"sandboxProfile":"codellm-embedded","runtimes":["python","bash","codellm.openai.chat.v1"],
 "policyDigest":"93350e09c8e4f3257e53607cc40b726c7634fc8da8ae83bb3986e5e82370e7c9","requiresReadyConfirmation":false,"futureKey":{"x":1},
 "workspaceTools":{"protocolVersion":1,"operations":["read_file","search_text","list_files","write_file","preview_edit","edit_file","execute_command"],
   "workspaces":[{"id":"primary","name":"project","operations":["read_file","search_text","list_files","write_file","preview_edit","edit_file","execute_command"]}],
   "writeFileModes":["replace","create"],"editFileModes":["single","batch"],"editFileFeatures":["expected_base_sha256"],"listFileFeatures":["after_path"],"later":true}}`

func TestValidateCapabilities(t *testing.T) {
	if err := ValidateCapabilities(mustObj(t, fullCaps)); err != nil {
		t.Fatalf("full capabilities rejected: %v", err)
	}
	if err := ValidateCapabilities(mustObj(t, `{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[]}`)); err != nil {
		t.Fatalf("minimal rejected: %v", err)
	}
	bad := []string{
		`{"sandboxProfile":"x","runtimes":[]}`,
		`{"statefulWorkspace":"yes","sandboxProfile":"x","runtimes":[]}`,
		`{"statefulWorkspace":false,"sandboxProfile":" ","runtimes":[]}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[""]}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"policyDigest":"ABC"}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":2,"operations":["read_file"],"workspaces":[{"id":"a","name":"a"}]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file","read_file"],"workspaces":[{"id":"a","name":"a"}]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file"],"workspaces":[{"id":"a","name":"a","extra":1}]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file"],"workspaces":[{"id":"a","name":"a","operations":["search_text"]}]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file"],"workspaces":[{"id":"a","name":"a"},{"id":"a","name":"b"}]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file"],"workspaces":[{"id":"a","name":"a"}],"writeFileModes":["replace"]}}`,
		`{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["list_files"],"workspaces":[{"id":"a","name":"a"}],"listFileFeatures":["after_path","after_path"]}}`,
	}
	for _, s := range bad {
		err := ValidateCapabilities(mustObj(t, s))
		var be *Error
		if !errors.As(err, &be) || be.Status != 400 || be.Message != MsgInvalidRegistration {
			t.Errorf("accepted or wrong error for %s: %v", s, err)
		}
	}
}

func TestValidateSettlementAndLease(t *testing.T) {
	s, err := ValidateSettlement(mustObj(t, vecC8))
	if err != nil || s.Generation != 7 || s.Status != StatusFulfilled || s.Result.Object() == nil {
		t.Fatalf("%+v %v", s, err)
	}
	for _, b := range []string{
		`{"protocolVersion":1,"generation":0,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"rejected","error":"x"}`,
		`{"protocolVersion":1,"generation":1,"leaseToken":"short","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"rejected","error":"x"}`,
		`{"protocolVersion":1,"generation":1,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"rejected"}`,
		`{"protocolVersion":1,"generation":1,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"rejected","error":"x","errorCode":"NOPE"}`,
		`{"protocolVersion":1,"generation":1,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"fulfilled","result":null}`,
		`{"protocolVersion":1,"generation":1.5,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"fulfilled","result":{}}`,
		`{"protocolVersion":2,"generation":1,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"fulfilled","result":{}}`,
		`{"protocolVersion":1,"generation":1,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"done","result":{}}`,
	} {
		if _, err := ValidateSettlement(mustObj(t, b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
	_, wait, err := ValidateLease(mustObj(t, `{"protocolVersion":1,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`))
	if err != nil || wait != DefaultWaitMs {
		t.Fatal(wait, err)
	}
	_, wait, _ = ValidateLease(mustObj(t, `{"protocolVersion":1,"waitMs":99999,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`))
	if wait != MaxWaitMs {
		t.Fatal(wait)
	}
	for _, b := range []string{`{"protocolVersion":1,"waitMs":-1,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`,
		`{"protocolVersion":1,"waitMs":1E400,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`,
		`{"protocolVersion":1,"workspaceLeaseSlot":256,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`,
		`{"protocolVersion":1,"workspaceLeaseSlot":1.5,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`,
		`{"protocolVersion":"1","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`} {
		if _, _, err := ValidateLease(mustObj(t, b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}

func TestNegotiation(t *testing.T) {
	req, _, err := ValidateRegister(mustObj(t, `{"protocolVersion":1,"workerId":"my-vm","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","capabilities":`+fullCaps+`}`))
	if err != nil {
		t.Fatal(err)
	}
	want := req.Capabilities

	compat := CompatibleCapabilities(want)
	if compat.WorkspaceTools == nil || !slices.Equal(compat.WorkspaceTools.Operations, []string{"read_file", "search_text"}) ||
		compat.WorkspaceTools.Workspaces[0].Operations != nil || compat.WorkspaceTools.WriteFileModes != nil {
		t.Fatalf("compatible set %+v", compat.WorkspaceTools)
	}
	if len(want.WorkspaceTools.Operations) != 7 {
		t.Fatal("CompatibleCapabilities mutated its input")
	}

	// A codellm hub supports everything: the negotiated set is the full one (E25).
	full := &RegisterResponse{}
	full.FillSupported()
	got := NegotiateCapabilities(want, full)
	wantB, _ := Marshal(want)
	gotB, _ := Marshal(got)
	if string(wantB) != string(gotB) {
		t.Fatalf("full negotiation\n%s\n%s", gotB, wantB)
	}

	// A hub sending no supported* lists keeps the compatible set (E24).
	old := NegotiateCapabilities(want, &RegisterResponse{})
	if !slices.Equal(old.WorkspaceTools.Operations, []string{"read_file", "search_text"}) || old.Allows("primary", "list_files") {
		t.Fatalf("fallback %+v", old.WorkspaceTools)
	}

	// A hub offering fewer features: modes fall back, unsupported ops vanish.
	partial := &RegisterResponse{
		SupportedWorkspaceToolOperations: []string{"read_file", "search_text", "list_files", "write_file", "edit_file"},
		SupportedWorkspaceEditFileModes:  []string{},
	}
	p := NegotiateCapabilities(want, partial)
	wt := p.WorkspaceTools
	if !slices.Equal(wt.Operations, []string{"read_file", "search_text", "list_files", "write_file"}) {
		t.Fatalf("ops %v", wt.Operations)
	}
	if !slices.Equal(wt.WriteFileModes, []string{"replace"}) || wt.EditFileModes != nil || wt.EditFileFeatures != nil || wt.ListFileFeatures != nil {
		t.Fatalf("modes %+v", wt)
	}
	if !slices.Equal(wt.Workspaces[0].Operations, wt.Operations) || !p.Allows("primary", "write_file") || p.Allows("primary", "edit_file") || p.Allows("other", "read_file") {
		t.Fatalf("workspace ops %+v", wt.Workspaces)
	}
	// The negotiated set is itself a valid registration.
	b, _ := Marshal(p)
	if err := ValidateCapabilities(mustObj(t, string(b))); err != nil {
		t.Fatalf("negotiated set invalid: %v\n%s", err, b)
	}
}
