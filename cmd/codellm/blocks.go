package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/markdown"
)

// cmdBlocks lists a body's blocks with the program each resolves to, or why it does not.
func cmdBlocks(args []string, stdout, stderr io.Writer) int {
	ef, fs, v, code := localCommand("blocks", "blocks [flags] FILE.md|-", args, stderr,
		config.Setting{Name: "json", Kind: config.Bool, Usage: "print JSON instead of a table"})
	if code >= 0 {
		return code
	}
	ef.sandboxMode = "off" // listing runs nothing; do not probe the sandbox
	if fs.NArg() != 1 {
		return config.UsageError(stderr, "blocks", fmt.Errorf("want exactly one FILE.md (or - for stdin), got %d arguments", fs.NArg()))
	}
	log, err := ef.logger(io.Discard)
	if err != nil {
		return config.UsageError(stderr, "blocks", err)
	}
	body, err := readBody(fs.Arg(0))
	if err != nil {
		return config.UsageError(stderr, "blocks", err)
	}
	ecfg, sb, err := ef.build(log)
	if err != nil {
		return startFail(stderr, "blocks", err)
	}
	defer sb.Close() // its pre-started helpers and their pooled cgroups

	blocks, err := markdown.Extract([]markdown.Source{{Message: 0, Text: body}})
	if err != nil {
		return failed(stderr, "blocks", err)
	}
	type row struct {
		Index   int    `json:"index"`
		Line    int    `json:"line"`
		Lang    string `json:"lang"`
		Program string `json:"program"`
		Error   string `json:"error,omitempty"`
		Code    string `json:"code"`
	}
	rows := make([]row, len(blocks))
	bad := 0
	for i, b := range blocks {
		rows[i] = row{Index: b.Index, Line: b.Line, Lang: b.Label, Code: b.Code}
		r, err := ecfg.Programs.ResolveOne(b)
		if err != nil {
			rows[i].Error = err.Error()
			bad++
		} else {
			rows[i].Program = r.Interp.Name
		}
	}
	if v.Bool("json") {
		writeJSON(stdout, map[string]any{"blocks": rows})
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BLOCK\tLINE\tLABEL\tPROGRAM\tERROR")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", r.Index+1, r.Line, r.Lang, r.Program, r.Error)
		}
		tw.Flush()
		if len(rows) == 0 {
			fmt.Fprintln(stdout, "(no fenced code blocks)")
		}
	}
	if bad > 0 {
		return 1
	}
	return 0
}
