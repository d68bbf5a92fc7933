package httpserve

import (
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
)

// Router dispatches on the standard library's patterns: "METHOD /path" or "/path" (every method), where
// a path ending in "/" is a subtree and "{name}" a wildcard (r.PathValue). A GET route also answers HEAD.
// Paths are matched by an http.ServeMux; methods are matched here, so that an unknown path gets the
// surface's NotFound and a known path with another method its MethodNotAllowed, both in the surface's
// own error envelope.
type Router struct {
	mux              *http.ServeMux
	notFound         http.HandlerFunc
	methodNotAllowed func(w http.ResponseWriter, r *http.Request, allow []string)

	mu    sync.RWMutex
	paths map[string]map[string]http.Handler // path pattern → method ("" = any) → handler
}

// NewRouter returns a router answering unknown paths with notFound and known paths asked with another
// method with methodNotAllowed (allow: the path's methods, sorted; the caller sets the Allow header as
// its envelope wants it).
func NewRouter(notFound http.HandlerFunc, methodNotAllowed func(w http.ResponseWriter, r *http.Request, allow []string)) *Router {
	rt := &Router{mux: http.NewServeMux(), notFound: notFound, methodNotAllowed: methodNotAllowed,
		paths: map[string]map[string]http.Handler{}}
	rt.add("/") // every path no pattern claims: not found
	return rt
}

// Handle registers h for pattern ("METHOD /path" or "/path"). Registering the same method and path again
// replaces the handler. It may be called while serving.
func (rt *Router) Handle(pattern string, h http.Handler) {
	method, p, ok := strings.Cut(pattern, " ")
	if !ok {
		method, p = "", pattern
	}
	p = strings.TrimSpace(p)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.add(p)
	rt.paths[p][method] = h
	// A subtree's root without its slash would be redirected by the mux: make it an ordinary path that
	// is not found unless it is registered itself.
	if root := strings.TrimSuffix(p, "/"); root != p && root != "" && !strings.HasSuffix(root, "}") {
		rt.add(root)
	}
}

// HandleFunc registers a handler function for pattern (see Handle).
func (rt *Router) HandleFunc(pattern string, h http.HandlerFunc) { rt.Handle(pattern, h) }

// add registers path with the mux once (the lock is held).
func (rt *Router) add(p string) {
	if _, ok := rt.paths[p]; ok {
		return
	}
	rt.paths[p] = map[string]http.Handler{}
	rt.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { rt.dispatch(p, w, r) })
}

// ServeHTTP routes r. A path the mux would redirect to its clean form is not found.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && cleanPath(p) != p {
		rt.notFound(w, r)
		return
	}
	rt.mux.ServeHTTP(w, r)
}

func (rt *Router) dispatch(p string, w http.ResponseWriter, r *http.Request) {
	rt.mu.RLock()
	methods := rt.paths[p]
	h, ok := methods[r.Method]
	if !ok && r.Method == http.MethodHead {
		h, ok = methods[http.MethodGet]
	}
	if !ok {
		h, ok = methods[""]
	}
	var allow []string
	if !ok {
		for m := range methods {
			allow = append(allow, m)
		}
	}
	rt.mu.RUnlock()
	switch {
	case ok:
		h.ServeHTTP(w, r)
	case len(allow) == 0:
		rt.notFound(w, r)
	default:
		slices.Sort(allow)
		rt.methodNotAllowed(w, r, allow)
	}
}

// cleanPath is the mux's canonical form of a path: rooted, dot segments and doubled slashes removed, a
// trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
