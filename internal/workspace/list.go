package workspace

import (
	"context"
	"io"
)

// list_files limits (§9.2).
const (
	defaultListResults = 100
	maxListResults     = 500
)

// ListFilesRequest is the §9.2 list_files request.
type ListFilesRequest struct {
	envelope
	Path       *string `json:"path,omitempty"`
	MaxResults *int    `json:"maxResults,omitempty"`
	AfterPath  *string `json:"afterPath,omitempty"`
}

// ListFilesResult is the §9.2 list_files result.
type ListFilesResult struct {
	Paths         []string `json:"paths"`
	Truncated     bool     `json:"truncated"`
	NextAfterPath *string  `json:"nextAfterPath,omitempty"`
}

// ListFiles implements list_files (§9.5): regular files in path order, strictly after afterPath. Candidates are
// streamed from rg in path order, so a page costs one walk up to the page's end, not a sort of the whole tree.
func (w *Workspace) ListFiles(ctx context.Context, r *ListFilesRequest) (*ListFilesResult, error) {
	maxResults, after, hasAfter, err := listBounds(r)
	if err != nil {
		return nil, err
	}
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	scope, _, err := w.resolveScope(r.Path)
	if err != nil {
		return nil, err
	}
	if hasAfter && !within(after, scope) {
		return nil, newErr(CodeInvalidRequest, "afterPath must lie inside path")
	}

	dctx, cancel := context.WithTimeout(ctx, toolDeadline)
	defer cancel()
	e, err := w.startEnum(dctx, scope, false)
	if err != nil {
		if dctx.Err() != nil {
			return nil, listTimeout(ctx)
		}
		return nil, newErr(CodeListUnavailable, err.Error())
	}
	res := &ListFilesResult{Paths: []string{}}
	early, readFailed, err := w.collect(e, scope, after, hasAfter, maxResults, res)
	if err != nil {
		return nil, err
	}
	stopErr := e.stop(early)
	if dctx.Err() != nil {
		return nil, listTimeout(ctx)
	}
	if readFailed {
		return nil, newErr(CodeListUnavailable, "cannot read ripgrep's output")
	}
	if stopErr != nil {
		return nil, newErr(CodeListUnavailable, stopErr.Error())
	}
	if res.Truncated && len(res.Paths) > 0 {
		last := res.Paths[len(res.Paths)-1]
		res.NextAfterPath = &last
	}
	return res, nil
}

// listBounds checks a list request's page: maxResults (default defaultListResults) and afterPath, which
// must name an entry.
func listBounds(r *ListFilesRequest) (maxResults int, after string, hasAfter bool, err error) {
	maxResults = defaultListResults
	if r.MaxResults != nil {
		if *r.MaxResults < 1 || *r.MaxResults > maxListResults {
			return 0, "", false, newErr(CodeInvalidRequest, "maxResults must be between 1 and 500")
		}
		maxResults = *r.MaxResults
	}
	if r.AfterPath == nil {
		return maxResults, "", false, nil
	}
	if after, err = cleanPath(*r.AfterPath); err != nil {
		return 0, "", false, err
	}
	if after == "" {
		return 0, "", false, newErr(CodeInvalidPath, "afterPath must name an entry, not the root")
	}
	return maxResults, after, true, nil
}

// collect reads ripgrep's sorted paths into res: duplicates dropped, out-of-order output refused, the
// page after afterPath, up to maxResults listable paths (Truncated when one more exists). early says the
// enumeration was stopped before its end, readFailed that its output could not be read.
func (w *Workspace) collect(e *enumerator, scope, after string, hasAfter bool, maxResults int, res *ListFilesResult) (early, readFailed bool, err error) {
	prev := ""
	for {
		b, err := e.next()
		if err == io.EOF {
			return false, false, nil
		}
		if err != nil {
			return true, true, nil
		}
		c, ok := candidatePath(b, scope)
		if !ok {
			continue
		}
		if prev != "" {
			switch cmp := comparePaths(c, prev); {
			case cmp == 0:
				continue // duplicate
			case cmp < 0:
				e.stop(true)
				return true, false, newErr(CodeListUnavailable, "ripgrep returned paths out of order")
			}
		}
		prev = c
		if hasAfter && comparePaths(c, after) <= 0 {
			continue
		}
		if len(res.Paths) == maxResults {
			// One more candidate exists beyond the page.
			res.Truncated = true
			return true, false, nil
		}
		if !w.listable(c) {
			continue
		}
		res.Paths = append(res.Paths, c)
	}
}

// listable re-resolves a candidate beneath the root without following any symlink: symlinks, non-regular
// files and anything that resolves elsewhere than rg reported are dropped.
func (w *Workspace) listable(rel string) bool {
	si, err := w.res.stat(rel)
	return err == nil && si.mode.IsRegular()
}

func listTimeout(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	return newErr(CodeListTimeout, "listing took longer than 10 s")
}
