package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/workspace"
)

// registerWorkspaceRoute serves the runtime command route (bridge-protocol §11.4) when the container's
// environment enables it (SANDBOX_EXTERNAL_WORKSPACE_ENABLED=true, _ROOT, _TOKEN: set by the worker's
// docker-nsjail supervisor for its command container only). Commands run in sb, as execute_command does on
// a host; the token is removed from codellm's own environment once read. It returns the workspace's close.
func registerWorkspaceRoute(route func(method, pattern, name string, h http.HandlerFunc), sb *sandbox.Sandbox,
	workDir string, log *slog.Logger) (func(), error) {
	if os.Getenv(workspace.EnvRouteEnabled) != "true" {
		return func() {}, nil
	}
	root, token := os.Getenv(workspace.EnvRouteRoot), os.Getenv(workspace.EnvRouteToken)
	_ = os.Unsetenv(workspace.EnvRouteToken)
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
