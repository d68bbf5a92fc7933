package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/workspace"
)

// workspaceRoute is the runtime command route's settings, serve's SANDBOX_EXTERNAL_WORKSPACE_ENABLED,
// _ROOT and _TOKEN rows (set by the worker's docker-nsjail supervisor for its command container only).
type workspaceRoute struct {
	enabled     bool
	root, token string
}

// registerWorkspaceRoute serves the runtime command route (bridge-protocol §11.4) when rt enables it.
// Commands run in sb, as execute_command does on a host; serve removes the token from its own environment
// as soon as it is loaded. It returns the workspace's close.
func registerWorkspaceRoute(route func(method, pattern, name string, h http.HandlerFunc), sb *sandbox.Sandbox,
	workDir string, rt workspaceRoute, log *slog.Logger) (func(), error) {
	if !rt.enabled {
		return func() {}, nil
	}
	root, token := rt.root, rt.token
	if len(token) < 32 {
		return nil, fmt.Errorf("%s needs %s of at least 32 bytes", workspace.EnvRouteEnabled, workspace.EnvRouteToken)
	}
	if workDir == "" {
		workDir = os.TempDir()
	}
	ws, err := workspace.Open(root, workspace.Options{AllowWrites: true, AllowCommands: true, Sandbox: sb,
		ProtectedPaths: []string{workDir}})
	if err != nil {
		return nil, fmt.Errorf("%s: %v", workspace.EnvRouteRoot, err)
	}
	route(http.MethodPost, workspace.PathCommandRoute, "workspace.execute", workspace.CommandRoute(ws, token))
	log.Info("runtime command route enabled", "root", root)
	return func() { ws.Close() }, nil
}
