package bridge

import "slices"

// Hub-side support lists (§3.3). A codellm hub sends every list with exactly
// this content.
var (
	SupportedWriteFileModes   = []string{"replace", "create"}
	SupportedEditFileModes    = []string{"single", "batch"}
	SupportedEditFileFeatures = []string{"expected_base_sha256"}
	SupportedListFileFeatures = []string{"after_path"}
)

// FillSupported sets every supported* list of a registration reply.
func (r *RegisterResponse) FillSupported() {
	r.SupportedWorkspaceToolOperations = slices.Clone(WorkspaceOperations)
	r.SupportedWorkspaceWriteFileModes = slices.Clone(SupportedWriteFileModes)
	r.SupportedWorkspaceEditFileModes = slices.Clone(SupportedEditFileModes)
	r.SupportedWorkspaceEditFileFeature = slices.Clone(SupportedEditFileFeatures)
	r.SupportedWorkspaceListFileFeature = slices.Clone(SupportedListFileFeatures)
}

// CompatibleOperations is what every hub understands (§8.2 step 1).
var CompatibleOperations = []string{"read_file", "search_text"}

func intersect(want, have []string) []string {
	var out []string
	for _, w := range want {
		if slices.Contains(have, w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

func cloneCaps(c Capabilities) Capabilities {
	out := c
	out.Runtimes = slices.Clone(c.Runtimes)
	if c.WorkspaceTools != nil {
		wt := *c.WorkspaceTools
		wt.Operations = slices.Clone(wt.Operations)
		wt.Workspaces = make([]Workspace, len(c.WorkspaceTools.Workspaces))
		for i, w := range c.WorkspaceTools.Workspaces {
			w.Operations = slices.Clone(w.Operations)
			wt.Workspaces[i] = w
		}
		wt.WriteFileModes = slices.Clone(wt.WriteFileModes)
		wt.EditFileModes = slices.Clone(wt.EditFileModes)
		wt.EditFileFeatures = slices.Clone(wt.EditFileFeatures)
		wt.ListFileFeatures = slices.Clone(wt.ListFileFeatures)
		out.WorkspaceTools = &wt
	}
	return out
}

// CompatibleCapabilities reduces c to the set any hub accepts (§8.2 step 1):
// operations limited to read_file and search_text, workspaces kept only if
// their operations (when present) include both, with operations stripped.
func CompatibleCapabilities(c Capabilities) Capabilities {
	out := cloneCaps(c)
	wt := out.WorkspaceTools
	if wt == nil {
		return out
	}
	ops := intersect(wt.Operations, CompatibleOperations)
	if len(ops) == 0 {
		out.WorkspaceTools = nil
		return out
	}
	var ws []Workspace
	for _, w := range wt.Workspaces {
		if w.Operations != nil && !(slices.Contains(w.Operations, "read_file") && slices.Contains(w.Operations, "search_text")) {
			continue
		}
		ws = append(ws, Workspace{ID: w.ID, Name: w.Name})
	}
	if len(ws) == 0 {
		out.WorkspaceTools = nil
		return out
	}
	out.WorkspaceTools = &WorkspaceTools{ProtocolVersion: ProtocolVersion, Operations: ops, Workspaces: ws}
	return out
}

// NegotiateCapabilities intersects what the worker wants with what the hub's
// registration reply supports (§8.2 step 2). The result is what the worker
// registers next and the only set it may serve.
func NegotiateCapabilities(want Capabilities, reply *RegisterResponse) Capabilities {
	out := cloneCaps(want)
	wt := out.WorkspaceTools
	if wt == nil {
		return out
	}
	if reply.SupportedWorkspaceToolOperations == nil {
		// An older hub that lists nothing only knows the compatible set,
		// which the first registration already carried; keep it (E24).
		return CompatibleCapabilities(want)
	}
	ops := intersect(wt.Operations, reply.SupportedWorkspaceToolOperations)

	modes := func(want, hub, fallback []string) []string {
		if want == nil {
			return nil
		}
		if hub == nil {
			hub = fallback
		}
		return intersect(want, hub)
	}
	remove := func(names ...string) {
		ops = slices.DeleteFunc(ops, func(o string) bool { return slices.Contains(names, o) })
	}
	wfm := modes(wt.WriteFileModes, reply.SupportedWorkspaceWriteFileModes, []string{"replace"})
	if wt.WriteFileModes != nil && len(wfm) == 0 {
		remove("write_file")
	}
	efm := modes(wt.EditFileModes, reply.SupportedWorkspaceEditFileModes, []string{"single"})
	if wt.EditFileModes != nil && len(efm) == 0 {
		remove("edit_file", "preview_edit")
	}
	eff := intersect(wt.EditFileFeatures, reply.SupportedWorkspaceEditFileFeature)
	lff := intersect(wt.ListFileFeatures, reply.SupportedWorkspaceListFileFeature)

	var ws []Workspace
	for _, w := range wt.Workspaces {
		if w.Operations != nil {
			w.Operations = intersect(w.Operations, ops)
			if len(w.Operations) == 0 {
				continue
			}
		}
		ws = append(ws, w)
	}
	if len(ops) == 0 || len(ws) == 0 {
		out.WorkspaceTools = nil
		return out
	}
	res := &WorkspaceTools{ProtocolVersion: ProtocolVersion, Operations: ops, Workspaces: ws}
	// A mode or feature only survives alongside an operation that needs it,
	// otherwise the hub's §8.1 validation would reject the registration.
	if slices.Contains(ops, "write_file") && len(wfm) > 0 {
		res.WriteFileModes = wfm
	}
	if (slices.Contains(ops, "edit_file") || slices.Contains(ops, "preview_edit")) && len(efm) > 0 {
		res.EditFileModes = efm
	}
	if slices.Contains(ops, "edit_file") && len(eff) > 0 {
		res.EditFileFeatures = eff
	}
	if slices.Contains(ops, "list_files") && len(lff) > 0 {
		res.ListFileFeatures = lff
	}
	out.WorkspaceTools = res
	return out
}

// Allows reports whether the active capabilities advertise op on workspace
// wsID. Both the worker (refusing forged requests) and the hub (never
// dispatching them) use it.
func (c *Capabilities) Allows(wsID, op string) bool {
	wt := c.WorkspaceTools
	if wt == nil || !slices.Contains(wt.Operations, op) {
		return false
	}
	for _, w := range wt.Workspaces {
		if w.ID == wsID {
			return w.Operations == nil || slices.Contains(w.Operations, op)
		}
	}
	return false
}

// HasRuntime reports whether label is among the advertised runtimes.
func (c *Capabilities) HasRuntime(label string) bool { return slices.Contains(c.Runtimes, label) }
